//! JavaScript's rounding as the reference prints its numbers: `Number(x.toFixed(n))` (half up on
//! the exact binary value) and `Math.round`.

/// JavaScript's `Number(x.toFixed(places))`: half up on the exact binary value.
pub fn to_fixed(x: f64, places: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // 40 more digits than asked: a tie in the exact expansion shows as 5 then zeros.
    let wide = format!("{:.*}", places + 40, x.abs());
    let (int_part, frac) = wide.split_once('.').unwrap_or((&wide, ""));
    let (kept, rest) = frac.split_at(places.min(frac.len()));
    let mut digits: Vec<u8> = int_part.bytes().chain(kept.bytes()).map(|b| b - b'0').collect();
    if rest.as_bytes().first().is_some_and(|&d| d >= b'5') {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, 1);
                break;
            }
            i -= 1;
            if digits[i] == 9 {
                digits[i] = 0;
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let split = digits.len() - places;
    let text: String = digits[..split].iter().map(|d| char::from(b'0' + d)).collect::<String>()
        + "."
        + &digits[split..].iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let value: f64 = text.parse().unwrap_or(x.abs());
    if x < 0.0 { -value } else { value }
}

/// JavaScript's `Math.round` for the non-negative values the planner produces.
pub(crate) fn js_round_f64(x: f64) -> f64 {
    let r = (x + 0.5).floor();
    if r - x > 0.5 { r - 1.0 } else { r }
}

/// [`js_round_f64`] as the whole number it is.
pub(crate) fn js_round(x: f64) -> u64 {
    js_round_f64(x) as u64
}
