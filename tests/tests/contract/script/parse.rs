//! The script parser: one line, one step; an error says what is wrong with the line.

use super::{Given, Op, Script, Step};
use gateway_core::breaker::SuccessKind;
use gateway_core::outcome::OutcomeClass;

pub(super) fn parse_step(line: &str) -> Result<Step, String> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let words: Vec<&str> = rest.split_whitespace().collect();
    let source = || words.first().map(|s| (*s).to_owned()).ok_or("a source name is missing".to_owned());
    // The words after the source: each must be one `take` knows.
    let options = |take: &mut dyn FnMut(&str) -> Result<bool, String>| -> Result<(), String> {
        for w in words.iter().skip(1) {
            if !take(w)? {
                return Err(format!("unexpected {w:?}"));
            }
        }
        Ok(())
    };
    let count = |what: &str, n: &str| n.parse::<u64>().map_err(|_| format!("{what} {n:?} is not a count"));
    let mut given = Given::default();
    let mut take_fence = |w: &str| -> Result<bool, String> {
        if let Some(e) = w.strip_prefix("epoch=") {
            given.epoch = Some(count("epoch", e)?);
            return Ok(true);
        }
        match w.strip_prefix("incarnation=") {
            Some(i) => {
                let n = i.strip_prefix('i').and_then(|n| n.parse::<usize>().ok()).filter(|&n| n >= 1);
                given.incarnation = Some(n.ok_or_else(|| format!("incarnation {i:?} is not a trace name like i1"))?);
                Ok(true)
            }
            None => Ok(false),
        }
    };
    Ok(match word {
        "breaker" => {
            let toml = rest.replace(',', "\n");
            Step::Breaker(toml::from_str(&toml).map_err(|e| format!("breaker keys: {e}"))?)
        }
        "source" => {
            let mut concurrency = 0;
            options(&mut |w| match w.strip_prefix("concurrency=") {
                Some(n) => {
                    concurrency = u32::try_from(count("concurrency", n)?).map_err(|_| format!("concurrency {n} is too large"))?;
                    Ok(true)
                }
                None => Ok(false),
            })?;
            Step::Source { name: source()?, concurrency }
        }
        "at" => Step::At(rest.trim().parse().map_err(|_| format!("{rest:?} is not a number of seconds"))?),
        "enter" | "force_open" | "show" => {
            options(&mut |_| Ok(false))?;
            match word {
                "enter" => Step::Op { source: source()?, op: Op::Enter, times: 1 },
                "force_open" => Step::Op { source: source()?, op: Op::ForceOpen, times: 1 },
                _ => Step::Show(source()?),
            }
        }
        "success" => {
            let mut kind = SuccessKind::Real;
            options(&mut |w| {
                if take_fence(w)? {
                    return Ok(true);
                }
                kind = match w {
                    "real" => SuccessKind::Real,
                    "slow" => SuccessKind::Slow,
                    "unusable" => SuccessKind::Unusable,
                    _ => return Ok(false),
                };
                Ok(true)
            })?;
            Step::Op { source: source()?, op: Op::Success(kind, given), times: 1 }
        }
        "failure" | "release" => {
            options(&mut take_fence)?;
            let op = if word == "failure" { Op::Failure(given) } else { Op::Release(given) };
            Step::Op { source: source()?, op, times: 1 }
        }
        "attempt" => {
            let class = words.get(1).ok_or("an outcome class is missing")?;
            let class = OutcomeClass::ALL.into_iter().find(|c| c.as_str() == *class).ok_or(format!("{class:?} is not an outcome class"))?;
            let times = match words.get(2) {
                None => 1,
                Some(w) => match w.strip_prefix('x').map(|n| count("repeat", n)) {
                    Some(Ok(n)) if n >= 1 => u32::try_from(n).map_err(|_| format!("repeat {n} is too large"))?,
                    _ => return Err(format!("the repeat is written xN with N ≥ 1, not {w:?}")),
                },
            };
            if let Some(extra) = words.get(3) {
                return Err(format!("unexpected {extra:?}"));
            }
            Step::Op { source: source()?, op: Op::Attempt(class), times }
        }
        "lose" if rest.trim().is_empty() => Step::Lose,
        "lose" => return Err("`lose` takes no arguments: the backend loses every gate".to_owned()),
        // `retry_after` alone asks over no gates (0).
        "retry_after" => Step::RetryAfter(words.iter().map(|s| (*s).to_owned()).collect()),
        other => return Err(format!("unknown step {other:?}")),
    })
}
/// The parser refuses what it does not know, naming the script, the line and the fault.
pub fn the_parser_names_the_line_and_what_is_wrong() {
    for (text, says) in [
        ("enter s x3", "case:2: unexpected \"x3\": \"enter s x3\""),
        ("success s sometimes", "unexpected \"sometimes\""),
        ("success s epoch=two", "epoch \"two\" is not a count"),
        ("source s concurency=4", "unexpected \"concurency=4\""),
        ("attempt s success x0", "the repeat is written xN with N ≥ 1, not \"x0\""),
        ("attempt s timeout", "\"timeout\" is not an outcome class"),
        ("attempt s", "an outcome class is missing"),
        ("enter", "a source name is missing"),
        ("at soon", "\"soon\" is not a number of seconds"),
        ("breaker fail_threshold = five", "breaker keys:"),
        ("open s", "unknown step \"open\""),
        ("failure s incarnation=7", "incarnation \"7\" is not a trace name like i1"),
        ("lose s", "`lose` takes no arguments"),
    ] {
        let error = Script::parse("case", &format!("# a comment\n{text}\n")).unwrap_err();
        assert!(error.starts_with("case:2: ") && error.contains(says), "{text:?}: {error}");
    }
    let ok = Script::parse("case", "success s epoch=2 slow incarnation=i3\nsuccess s unusable\nattempt s transient x2\nlose\n").unwrap();
    let fence = Given { epoch: Some(2), incarnation: Some(3) };
    assert!(matches!(ok.lines[0].1, Step::Op { op: Op::Success(SuccessKind::Slow, g), .. } if g == fence), "{:?}", ok.lines[0]);
    assert!(matches!(ok.lines[1].1, Step::Op { op: Op::Success(SuccessKind::Unusable, g), .. } if g == Given::default()));
    assert!(matches!(ok.lines[3].1, Step::Lose));
    assert!(matches!(ok.lines[2].1, Step::Op { op: Op::Attempt(OutcomeClass::Transient), times: 2, .. }));
}
