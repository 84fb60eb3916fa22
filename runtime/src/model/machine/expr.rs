//! The expression language of machine actions: `${…}` in a string value.
//!
//! A value that is exactly `${expr}` evaluates to the expression's JSON value; `${…}` inside other
//! text is replaced by the value's text (strings as they are); anything else is a literal.
//! Expressions: numbers, `'strings'` or `"strings"`, `true`, `false`, `null`; names — a state
//! variable, else a config constant, `now` (RFC 3339, UTC), `signal.actor`, `signal.name`,
//! `signal.data.KEY…`, `state`; `+` (numbers add, otherwise text joins), `-`, `*`, `/`, `%`;
//! `==`, `!=`, `<`, `<=`, `>`, `>=`; `&&`, `||` (short-circuit: the right side is not evaluated
//! when the left decides), `!`; parentheses; `has(name)` (true when the name is defined and not
//! null: `has(signal.data.reason) && signal.data.reason != ''` guards an optional key); `x ?? y`
//! (`y` when `x` is null, or undefined when `x` is a bare name; the loosest operator; chains). A name that is not defined is an
//! error anywhere else (a typo must not read as null). A `}` inside a quoted string does not end
//! the `${…}`.

use serde_json::{Number, Value};

/// What names mean while evaluating.
pub trait Scope {
    /// The value of `path` (`reminders`, `signal.data.id`), if defined.
    fn lookup(&self, path: &str) -> Option<Value>;
}

/// Evaluate a template value (see the module docs).
///
/// # Errors
/// A malformed expression, an undefined name, or an operation on the wrong kinds of value.
pub fn eval_value(v: &Value, scope: &dyn Scope) -> Result<Value, String> {
    match v {
        Value::String(s) => eval_text(s, scope),
        Value::Array(a) => a
            .iter()
            .map(|x| eval_value(x, scope))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| eval_value(x, scope).map(|v| (k.clone(), v)))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// The longest text an expression makes: the size a job's variables may have in all.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

fn too_long(expr: &str, bytes: usize) -> String {
    let shown: String = expr.chars().take(80).collect();
    format!("{shown:?} makes a text of {bytes} bytes, over the 1 MiB a job's variables may hold")
}

/// Evaluate a string: a whole `${expr}`, text with `${…}` in it, or a literal.
///
/// # Errors
/// As [`eval_value`].
pub fn eval_text(s: &str, scope: &dyn Scope) -> Result<Value, String> {
    let t = s.trim();
    if let Some(inner) = t.strip_prefix("${")
        && closing(inner) == Some(inner.len() - 1)
    {
        return eval(&inner[..inner.len() - 1], scope);
    }
    if !s.contains("${") {
        return Ok(Value::String(s.to_string()));
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = closing(after).ok_or_else(|| format!("{s:?}: an unclosed ${{"))?;
        out.push_str(&text_of(&eval(&after[..end], scope)?));
        if out.len() > MAX_TEXT_BYTES {
            return Err(too_long(s, out.len()));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// Where the `}` that closes a `${` is in `after` (the text after the `${`): the first one that is
/// not inside a quoted string.
fn closing(after: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in after.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '}') => return Some(i),
            _ => {}
        }
    }
    None
}

/// A value as text: strings as they are, the rest as JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether a value counts as true: `false`, `null`, `0`, `""` do not.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

/// Evaluate one expression.
///
/// # Errors
/// As [`eval_value`].
pub fn eval(expr: &str, scope: &dyn Scope) -> Result<Value, String> {
    let tokens = lex(expr)?;
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        depth: 0,
        scope,
        expr,
        skip: false,
    };
    let v = p.coalesce()?;
    if p.at != tokens.len() {
        return Err(format!("{expr:?}: unexpected {:?}", tokens[p.at]));
    }
    Ok(v)
}

/// Whether `expr` parses (names are not looked up): for load-time checks.
pub fn check(expr_text: &str) -> Result<(), String> {
    struct Any;
    impl Scope for Any {
        fn lookup(&self, _: &str) -> Option<Value> {
            Some(Value::Null)
        }
    }
    let mut rest = expr_text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let end = closing(after).ok_or_else(|| format!("{expr_text:?}: an unclosed ${{"))?;
        let tokens = lex(&after[..end])?;
        let mut p = Parser {
            tokens: &tokens,
            at: 0,
            depth: 0,
            scope: &Any,
            expr: &after[..end],
            skip: true,
        };
        // Parse only: evaluation errors on nulls are not syntax errors.
        p.syntax_only()?;
        rest = &after[end + 1..];
    }
    Ok(())
}

/// The deepest nesting of parentheses and unary operators an expression may have.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    const OPS: [&str; 18] = [
        "??", "&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "(", ")",
        ",",
    ];
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == '.') {
                i += 1;
            }
            let text: String = b[start..i].iter().collect();
            out.push(Tok::Num(
                text.parse()
                    .map_err(|_| format!("{s:?}: bad number {text:?}"))?,
            ));
        } else if c == '\'' || c == '"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != c {
                i += 1;
            }
            if i >= b.len() {
                return Err(format!("{s:?}: an unclosed string"));
            }
            out.push(Tok::Str(b[start..i].iter().collect()));
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            // A `-` joins a name only when a letter follows (`grace-period`): `x-1` is `x - 1`.
            while i < b.len()
                && (b[i].is_alphanumeric()
                    || matches!(b[i], '_' | '.')
                    || (b[i] == '-'
                        && b.get(i + 1).is_some_and(|n| n.is_alphabetic() || *n == '_')))
            {
                i += 1;
            }
            out.push(Tok::Name(b[start..i].iter().collect()));
        } else {
            let rest: String = b[i..].iter().take(2).collect();
            let op = OPS
                .iter()
                .find(|o| rest.starts_with(**o))
                .ok_or_else(|| format!("{s:?}: unexpected {c:?}"))?;
            out.push(Tok::Op(op));
            i += op.chars().count();
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [Tok],
    at: usize,
    /// Nesting so far: parentheses and unary operators recurse, and a description must not be
    /// able to overflow the stack.
    depth: usize,
    scope: &'a dyn Scope,
    expr: &'a str,
    /// Parsing a side that is not evaluated (the right of a decided `&&`/`||`/`??`, or a
    /// syntax check): names are not looked up and nothing fails on values; the result is null.
    skip: bool,
}

/// The largest integer arithmetic (on doubles) keeps exactly: 2^53.
const EXACT_INT: u64 = 1 << 53;

fn num(v: &Value, expr: &str) -> Result<f64, String> {
    let f = v
        .as_f64()
        .ok_or_else(|| format!("{expr:?}: {} is not a number", text_of(v)))?;
    // Numbers are kept exactly or refused: 9007199254740993 plus 0 came out ...992.
    let beyond = match (v.as_i64(), v.as_u64()) {
        (Some(i), _) => i.unsigned_abs() > EXACT_INT,
        (None, Some(u)) => u > EXACT_INT,
        _ => false,
    };
    if beyond {
        return Err(format!(
            "{expr:?}: {v} is beyond 2^53, the largest integer arithmetic keeps exactly; keep it as a string"
        ));
    }
    Ok(f)
}

fn number(f: f64, expr: &str) -> Result<Value, String> {
    if !f.is_finite() {
        // A double's overflow (1e200 * 1e200) was stored as null, and compared as "null".
        return Err(format!("{expr:?}: the result is too large for a number"));
    }
    Ok(if f.fract() == 0.0 && f.abs() <= EXACT_INT as f64 {
        // Whole numbers stay integers: counters read as 3, not 3.0.
        Value::Number(Number::from(f as i64))
    } else {
        Number::from_f64(f).map_or(Value::Null, Value::Number)
    })
}

impl Parser<'_> {
    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.tokens.get(self.at), Some(Tok::Op(o)) if *o == op) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn syntax_only(&mut self) -> Result<(), String> {
        self.coalesce().map(|_| ())?;
        if self.at != self.tokens.len() {
            return Err(format!(
                "{:?}: unexpected {:?}",
                self.expr, self.tokens[self.at]
            ));
        }
        Ok(())
    }

    /// Parse with `skip` set (when `skip_it`), restoring it after.
    fn maybe_skipping<T>(
        &mut self,
        skip_it: bool,
        f: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<T, String> {
        let was = self.skip;
        self.skip = was || skip_it;
        let out = f(self);
        self.skip = was;
        out
    }

    /// `x ?? y ?? …`: the first operand that is not null. An operand that is a bare name
    /// directly before `??` may be undefined (it reads as null); anything else is evaluated as
    /// everywhere, so a typo inside a larger expression still fails.
    fn coalesce(&mut self) -> Result<Value, String> {
        let mut v = self.operand()?;
        while self.eat("??") {
            let decided = !v.is_null();
            let r = self.maybe_skipping(decided, Self::operand)?;
            if !decided {
                v = r;
            }
        }
        Ok(v)
    }

    fn operand(&mut self) -> Result<Value, String> {
        if let (Some(Tok::Name(n)), Some(Tok::Op("??"))) =
            (self.tokens.get(self.at), self.tokens.get(self.at + 1))
            && !matches!(n.as_str(), "true" | "false" | "null")
        {
            let n = n.clone();
            self.at += 1;
            if self.skip {
                return Ok(Value::Null);
            }
            return Ok(self.scope.lookup(&n).unwrap_or(Value::Null));
        }
        self.or()
    }

    fn or(&mut self) -> Result<Value, String> {
        let mut v = self.and()?;
        while self.eat("||") {
            let decided = truthy(&v);
            let r = self.maybe_skipping(decided, Self::and)?;
            v = Value::Bool(decided || truthy(&r));
        }
        Ok(if self.skip { Value::Null } else { v })
    }

    fn and(&mut self) -> Result<Value, String> {
        let mut v = self.cmp()?;
        while self.eat("&&") {
            let decided = !truthy(&v);
            let r = self.maybe_skipping(decided, Self::cmp)?;
            v = Value::Bool(!decided && truthy(&r));
        }
        Ok(if self.skip { Value::Null } else { v })
    }

    fn cmp(&mut self) -> Result<Value, String> {
        let v = self.sum()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat(op) {
                let r = self.sum()?;
                if self.skip {
                    return Ok(Value::Null);
                }
                let ord = match (v.as_f64(), r.as_f64()) {
                    (Some(a), Some(b)) => a.partial_cmp(&b),
                    _ => Some(text_of(&v).cmp(&text_of(&r))),
                };
                let eq = match (v.as_f64(), r.as_f64()) {
                    (Some(a), Some(b)) => a == b,
                    _ => v == r,
                };
                use std::cmp::Ordering::*;
                return Ok(Value::Bool(match op {
                    "==" => eq,
                    "!=" => !eq,
                    "<" => ord == Some(Less),
                    "<=" => matches!(ord, Some(Less | Equal)),
                    ">" => ord == Some(Greater),
                    _ => matches!(ord, Some(Greater | Equal)),
                }));
            }
        }
        Ok(v)
    }

    fn sum(&mut self) -> Result<Value, String> {
        let mut v = self.product()?;
        loop {
            if self.eat("+") {
                let r = self.product()?;
                if self.skip {
                    continue;
                }
                v = if v.is_number() && r.is_number() {
                    number(num(&v, self.expr)? + num(&r, self.expr)?, self.expr)?
                } else {
                    // Bounded before it is built: `${s + s}` doubling at each transition reached
                    // hundreds of MB in one plan, refused only once made.
                    let (a, b) = (text_of(&v), text_of(&r));
                    if a.len() + b.len() > MAX_TEXT_BYTES {
                        return Err(too_long(self.expr, a.len() + b.len()));
                    }
                    Value::String(a + &b)
                };
            } else if self.eat("-") {
                let r = self.product()?;
                if self.skip {
                    continue;
                }
                v = number(num(&v, self.expr)? - num(&r, self.expr)?, self.expr)?;
            } else {
                return Ok(v);
            }
        }
    }

    fn product(&mut self) -> Result<Value, String> {
        let mut v = self.unary()?;
        loop {
            let op = if self.eat("*") {
                '*'
            } else if self.eat("/") {
                '/'
            } else if self.eat("%") {
                '%'
            } else {
                return Ok(v);
            };
            let r = self.unary()?;
            if self.skip {
                continue;
            }
            let (a, b) = (num(&v, self.expr)?, num(&r, self.expr)?);
            if op != '*' && b == 0.0 {
                return Err(format!("{:?}: division by zero", self.expr));
            }
            v = number(
                match op {
                    '*' => a * b,
                    '/' => a / b,
                    _ => a % b,
                },
                self.expr,
            )?;
        }
    }

    fn unary(&mut self) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "{:?}: nested more than {MAX_DEPTH} deep",
                self.expr
            ));
        }
        let v = self.unary_inner();
        self.depth -= 1;
        v
    }

    fn unary_inner(&mut self) -> Result<Value, String> {
        if self.eat("!") {
            return Ok(Value::Bool(!truthy(&self.unary()?)));
        }
        if self.eat("-") {
            let v = self.unary()?;
            if self.skip {
                return Ok(Value::Null);
            }
            return number(-num(&v, self.expr)?, self.expr);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Value, String> {
        let tok = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| format!("{:?}: ends too soon", self.expr))?;
        self.at += 1;
        match tok {
            Tok::Num(n) => number(n, self.expr),
            Tok::Str(s) => Ok(Value::String(s)),
            Tok::Name(n) => match n.as_str() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                "null" => Ok(Value::Null),
                "has" if self.eat("(") => {
                    let Some(Tok::Name(path)) = self.tokens.get(self.at).cloned() else {
                        return Err(format!("{:?}: has( takes a name", self.expr));
                    };
                    self.at += 1;
                    if !self.eat(")") {
                        return Err(format!("{:?}: has({path} without its )", self.expr));
                    }
                    Ok(Value::Bool(
                        !self.skip && self.scope.lookup(&path).is_some_and(|v| !v.is_null()),
                    ))
                }
                _ if self.skip => Ok(Value::Null),
                _ => self
                    .scope
                    .lookup(&n)
                    .ok_or_else(|| format!("{:?}: {n:?} is not defined", self.expr)),
            },
            Tok::Op("(") => {
                let v = self.coalesce()?;
                if !self.eat(")") {
                    return Err(format!("{:?}: a ( without its )", self.expr));
                }
                Ok(v)
            }
            Tok::Op(o) => Err(format!("{:?}: unexpected {o:?}", self.expr)),
        }
    }
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
