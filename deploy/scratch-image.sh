#!/usr/bin/env bash
# An image of gateway-server built from `scratch` with podman, for machines that cannot pull base
# images (no registry): the release binary, the shared libraries `ldd` names, and the same
# entrypoint, user, port and health check as ../Dockerfile.
#
#   deploy/scratch-image.sh [TAG]      # default tag: llm-gateway:scratch
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-llm-gateway:scratch}"
cargo build --release --locked -p gateway-server
binary=target/release/gateway-server
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
install -D -m 0755 "$binary" "$root/usr/local/bin/gateway-server"
# Every library the binary links, at the path the loader looks for it.
for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    install -D -m 0755 "$lib" "$root$lib"
done
mkdir -p "$root/etc/gateway" "$root/tmp" && chmod 1777 "$root/tmp"
echo 'gateway:x:10001:10001::/:/usr/local/bin/gateway-server' > "$root/etc/passwd"
echo 'gateway:x:10001:' > "$root/etc/group"
tar -C "$root" -cf "$root.tar" .
podman import \
    --change 'USER 10001:10001' \
    --change 'EXPOSE 8080' \
    --change 'STOPSIGNAL SIGTERM' \
    --change 'ENTRYPOINT ["/usr/local/bin/gateway-server"]' \
    --change 'CMD ["--config", "/etc/gateway/gateway.toml", "--listen", "0.0.0.0:8080"]' \
    "$root.tar" "$tag" >/dev/null
rm -f "$root.tar"
echo "$tag"
