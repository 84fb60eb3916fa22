//! Tests of the expression language (expr.rs).

use super::*;
use serde_json::json;

struct Vars(Value);
impl Scope for Vars {
    fn lookup(&self, path: &str) -> Option<Value> {
        self.0
            .pointer(&format!("/{}", path.replace('.', "/")))
            .cloned()
    }
}

#[test]
fn expressions() {
    let s = Vars(
        json!({"reminders": 2, "grace": "7 days", "signal": {"actor": "ann", "data": {"n": 3}}}),
    );
    assert_eq!(eval_text("${reminders + 1}", &s), Ok(json!(3)));
    assert_eq!(eval_text("${grace}", &s), Ok(json!("7 days")));
    assert_eq!(eval_text("by ${signal.actor}", &s), Ok(json!("by ann")));
    assert_eq!(
        eval_text("${signal.data.n * 2 > 5 && !false}", &s),
        Ok(json!(true))
    );
    assert_eq!(eval_text("${(1 + 2) * 3 % 4}", &s), Ok(json!(1)));
    assert_eq!(eval_text("${'a' + 1}", &s), Ok(json!("a1")));
    assert_eq!(eval_text("plain", &s), Ok(json!("plain")));
    assert!(
        eval_text("${nope + 1}", &s)
            .unwrap_err()
            .contains("\"nope\" is not defined")
    );
    assert!(eval_text("${1 / 0}", &s).is_err());
    assert!(eval_text("${1 +}", &s).is_err());
    assert!(check("${reminders +}").is_err());
    assert!(check("x ${a.b == 'c'} y").is_ok());
    let deep = format!("${{{}1{}}}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(
        eval_text(&deep, &s)
            .unwrap_err()
            .contains("nested more than 64 deep")
    );
    assert!(check(&format!("${{{}true}}", "!".repeat(100_000))).is_err());
}

#[test]
fn and_or_short_circuit_and_optional_keys_can_be_guarded() {
    let s = Vars(json!({"n": 0, "signal": {"data": {"reason": "spam", "empty": null}}}));
    // The right side is not evaluated when the left decides: no "not defined", no division
    // by zero.
    assert_eq!(eval_text("${false && nope > 1}", &s), Ok(json!(false)));
    assert_eq!(eval_text("${true || nope > 1}", &s), Ok(json!(true)));
    assert_eq!(eval_text("${n != 0 && 10 / n > 1}", &s), Ok(json!(false)));
    assert!(
        eval_text("${true && nope}", &s)
            .unwrap_err()
            .contains("not defined")
    );
    assert_eq!(eval_text("${has(signal.data.reason)}", &s), Ok(json!(true)));
    assert_eq!(
        eval_text("${has(signal.data.missing)}", &s),
        Ok(json!(false))
    );
    assert_eq!(eval_text("${has(signal.data.empty)}", &s), Ok(json!(false)));
    assert_eq!(
        eval_text("${has(signal.data.missing) && signal.data.missing > 3}", &s),
        Ok(json!(false))
    );
    assert_eq!(
        eval_text("${signal.data.missing ?? 'none'}", &s),
        Ok(json!("none"))
    );
    assert_eq!(
        eval_text("${signal.data.reason ?? nope}", &s),
        Ok(json!("spam"))
    );
    assert_eq!(eval_text("${(signal.data.empty) ?? 7}", &s), Ok(json!(7)));
    // Undefined still fails where no `??` guards it directly: inside a larger left side too.
    assert!(eval_text("${signal.data.missing + 1}", &s).is_err());
    assert!(eval_text("${tpyo > 3 ?? false}", &s).is_err());
    assert!(eval_text("${signal.data.n + 1 ?? 0}", &s).is_err());
    assert_eq!(
        eval_text("${signal.data.a ?? signal.data.b ?? 'none'}", &s),
        Ok(json!("none"))
    );
    assert!(check("${has(a.b) && a.b ?? 1}").is_ok());
    assert!(check("${has(1)}").is_err());
}

#[test]
fn a_brace_inside_a_string_does_not_end_the_expression() {
    let s = Vars(json!({"who": "ann"}));
    assert_eq!(eval_text("${'{' + who + '}'}", &s), Ok(json!("{ann}")));
    assert_eq!(
        eval_text("to ${who + \"}\"} and ${'}'}", &s),
        Ok(json!("to ann} and }"))
    );
    assert!(check("${'}' + who}").is_ok());
    assert!(eval_text("${'}'", &s).is_err());
}

#[test]
fn numbers_are_exact_or_refused() {
    let s = Vars(
        json!({"big": 1e200, "odd": 9_007_199_254_740_993_u64, "even": 9_007_199_254_740_992_u64}),
    );
    // Overflow was stored as null (and compared as the text "null").
    let overflow = eval_text("${big * big}", &s).unwrap_err();
    assert!(overflow.contains("too large for a number"), "{overflow}");
    assert!(eval_text("${big * big > 1}", &s).is_err());
    assert!(eval_text("${-1e400}", &s).is_err());
    // An integer past 2^53 came out rounded: refused, naming it.
    let inexact = eval_text("${odd + 0}", &s).unwrap_err();
    assert!(inexact.contains("9007199254740993"), "{inexact}");
    assert!(eval_text("${odd - 1}", &s).is_err());
    assert_eq!(
        eval_text("${even - 1}", &s),
        Ok(json!(9_007_199_254_740_991_i64))
    );
    // Text is never arithmetic: it passes through as written.
    assert_eq!(
        eval_text("${odd}", &s),
        Ok(json!(9_007_199_254_740_993_u64))
    );
    assert_eq!(
        eval_text("v=${'a' + odd}", &s),
        Ok(json!("v=a9007199254740993"))
    );
}

/// `${x-1}` is a subtraction, not a name (issue 47 item 12); a name may still hold a `-` before
/// a letter. Text is bounded while it is built.
#[test]
fn a_minus_before_a_digit_subtracts_and_text_is_bounded() {
    let s = Vars(json!({"x": 5, "grace-period": 7, "big": "x".repeat(600 * 1024)}));
    assert_eq!(eval_text("${x-1}", &s), Ok(json!(4)));
    assert_eq!(eval_text("${grace-period}", &s), Ok(json!(7)));
    assert_eq!(eval_text("${grace-period-2}", &s), Ok(json!(5)));
    let err = eval_text("${big + big}", &s).unwrap_err();
    assert!(err.contains("1 MiB"), "{err}");
    let err = eval_text("${big}${big}", &s).unwrap_err();
    assert!(err.contains("1 MiB"), "{err}");
}

#[test]
fn a_long_chain_is_a_wide_node_not_a_deep_one() {
    let s = Vars(json!({"n": 1}));
    let sum = format!("${{{}}}", vec!["n"; 200_000].join(" + "));
    assert_eq!(eval_text(&sum, &s), Ok(json!(200_000)));
    let all = format!("${{{}}}", vec!["true"; 100_000].join(" && "));
    assert_eq!(eval_text(&all, &s), Ok(json!(true)));
    // The same text a second time: the kept tree, the same answer.
    assert_eq!(eval_text(&sum, &s), Ok(json!(200_000)));
}
