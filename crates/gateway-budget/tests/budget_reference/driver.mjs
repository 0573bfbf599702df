// Runs the seed-002 reference (reference.mjs) on JSON cases, for tests/budget_reference.rs.
//
//   node driver.mjs < cases.jsonl
//
// Each input line is {"mode": "plan" | "trace", "input": {...}}, where `input` is what
// `cargo xtask budget plan|trace` reads on stdin (a threshold of "Infinity" is the string, as
// there). The first output line describes the engine; then one line per case: for `plan`,
// JSON.stringify({plan, worstCase}) as xtask prints it; for `trace`, the breaker trace; for an
// input the reference rejects, {"error": "<the reference's retry-budget: … message>"}.

import { readFileSync } from "node:fs";
import { AiError, planRetryBudget, traceBreaker, worstCaseRetryCost } from "./reference.mjs";

const infinite = (value) => (value === "Infinity" ? Number.POSITIVE_INFINITY : value);

function run({ mode, input }) {
  if (mode === "plan") {
    const policy = { ...input.policy, consecutiveFailureThreshold: infinite(input.policy.consecutiveFailureThreshold) };
    const plan = planRetryBudget(input.nodes, policy);
    return { plan, worstCase: worstCaseRetryCost(input.nodes, policy) };
  }
  if (mode === "trace") {
    const options = { ...input.breaker, failureThreshold: infinite(input.breaker.failureThreshold) };
    return traceBreaker(options, input.calls);
  }
  throw new Error(`driver: unknown mode ${mode}`);
}

const lines = readFileSync(0, "utf8").split("\n").filter((line) => line !== "");
// Node 20's V8 computes Math.pow with its own fdlibm port; newer V8 can use the C library's pow
// (flag use_std_math_pow); the two differ in the last bit for some inputs. fdlibm's 10^-5 is
// not 1e-5.
const out = [JSON.stringify({ node: process.version, v8: process.versions.v8, fdlibmPow: Math.pow(10, -5) !== 1e-5 })];
for (const line of lines) {
  try {
    out.push(JSON.stringify(run(JSON.parse(line))));
  } catch (error) {
    if (!(error instanceof AiError)) throw error;
    out.push(JSON.stringify({ error: error.message }));
  }
}
process.stdout.write(out.join("\n") + "\n");
