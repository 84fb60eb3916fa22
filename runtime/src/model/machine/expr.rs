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

/// Evaluate one expression (parsed once per process: see [`parsed`]).
///
/// # Errors
/// As [`eval_value`].
pub fn eval(expr: &str, scope: &dyn Scope) -> Result<Value, String> {
    parsed(expr)?.eval(scope)
}

/// Whether `expr_text`'s every `${…}` parses (names are not looked up): for load-time checks.
pub fn check(expr_text: &str) -> Result<(), String> {
    let mut rest = expr_text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let end = closing(after).ok_or_else(|| format!("{expr_text:?}: an unclosed ${{"))?;
        parsed(&after[..end])?;
        rest = &after[end + 1..];
    }
    Ok(())
}

/// The tree of `expr`, parsed the first time it is asked for and kept: a description's
/// expressions are few and version-locked, so each is parsed once, not at every transition.
/// The cache is bounded: only trees of texts up to 4 KiB are kept (not errors), 4,096 of them,
/// past which it starts afresh; parsing happens outside its lock.
fn parsed(expr: &str) -> Result<std::sync::Arc<Expr>, String> {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, PoisonError};
    static PARSED: LazyLock<Mutex<HashMap<String, Arc<Expr>>>> = LazyLock::new(Default::default);
    const KEPT: usize = 4096;
    const KEPT_TEXT: usize = 4096;
    // Poisoning cannot leave the map half-written (an insert is one call): take it as it is.
    if let Some(hit) = PARSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(expr)
    {
        return Ok(hit.clone());
    }
    let tree = Arc::new(Expr::parse(expr)?);
    if expr.len() <= KEPT_TEXT {
        let mut cache = PARSED.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= KEPT {
            cache.clear();
        }
        cache.insert(expr.to_string(), tree.clone());
    }
    Ok(tree)
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

/// An expression parsed: its text (for messages) and its tree. Chains of one operator are
/// one node with a list, so that a long `1 + 1 + …` is a wide node, not a deep one.
#[derive(Debug)]
pub struct Expr {
    text: String,
    root: Node,
}

#[derive(Debug)]
enum Node {
    Lit(Value),
    /// A name that must be defined.
    Name(String),
    /// A bare name directly before `??`: undefined reads as null.
    Loose(String),
    Has(String),
    Not(Box<Node>),
    Neg(Box<Node>),
    /// `a ?? b ?? …`: the first that is not null.
    Coalesce(Vec<Node>),
    /// `a || b || …` and `a && b && …`: short-circuit, true or false (one operand: itself).
    Or(Vec<Node>),
    And(Vec<Node>),
    Cmp(&'static str, Box<Node>, Box<Node>),
    /// A left operand and `+`/`-` (or `*`/`/`/`%`) with their right operands, left to right.
    Arith(Box<Node>, Vec<(&'static str, Node)>),
}

struct Parser<'a> {
    tokens: &'a [Tok],
    at: usize,
    /// Nesting so far: parentheses and unary operators recurse, and a description must not be
    /// able to overflow the stack.
    depth: usize,
    expr: &'a str,
}

impl Expr {
    /// Parse `text`.
    ///
    /// # Errors
    /// A malformed expression, with what was wrong where.
    pub fn parse(text: &str) -> Result<Expr, String> {
        let tokens = lex(text)?;
        let mut p = Parser {
            tokens: &tokens,
            at: 0,
            depth: 0,
            expr: text,
        };
        let root = p.coalesce()?;
        if p.at != tokens.len() {
            return Err(format!("{text:?}: unexpected {:?}", tokens[p.at]));
        }
        Ok(Expr {
            text: text.to_string(),
            root,
        })
    }

    /// Evaluate the tree in `scope`.
    ///
    /// # Errors
    /// An undefined name, or an operation on the wrong kinds of value.
    pub fn eval(&self, scope: &dyn Scope) -> Result<Value, String> {
        self.node(&self.root, scope)
    }

    fn node(&self, n: &Node, scope: &dyn Scope) -> Result<Value, String> {
        let expr = self.text.as_str();
        Ok(match n {
            Node::Lit(v) => v.clone(),
            Node::Name(name) => scope
                .lookup(name)
                .ok_or_else(|| format!("{expr:?}: {name:?} is not defined"))?,
            Node::Loose(name) => scope.lookup(name).unwrap_or(Value::Null),
            Node::Has(name) => Value::Bool(scope.lookup(name).is_some_and(|v| !v.is_null())),
            Node::Not(x) => Value::Bool(!truthy(&self.node(x, scope)?)),
            Node::Neg(x) => number(-num(&self.node(x, scope)?, expr)?, expr)?,
            Node::Coalesce(list) => {
                let mut v = Value::Null;
                for x in list {
                    v = self.node(x, scope)?;
                    if !v.is_null() {
                        break;
                    }
                }
                v
            }
            Node::Or(list) | Node::And(list) => {
                let or = matches!(n, Node::Or(_));
                let (first, rest) = list.split_first().ok_or("an empty chain")?;
                let mut v = self.node(first, scope)?;
                for x in rest {
                    // `||` is decided by a true side, `&&` by a false one.
                    if truthy(&v) == or {
                        v = Value::Bool(or);
                        continue;
                    }
                    v = Value::Bool(truthy(&self.node(x, scope)?));
                }
                v
            }
            Node::Cmp(op, a, b) => {
                let (v, r) = (self.node(a, scope)?, self.node(b, scope)?);
                let ord = match (v.as_f64(), r.as_f64()) {
                    (Some(a), Some(b)) => a.partial_cmp(&b),
                    _ => Some(text_of(&v).cmp(&text_of(&r))),
                };
                let eq = match (v.as_f64(), r.as_f64()) {
                    (Some(a), Some(b)) => a == b,
                    _ => v == r,
                };
                use std::cmp::Ordering::*;
                Value::Bool(match *op {
                    "==" => eq,
                    "!=" => !eq,
                    "<" => ord == Some(Less),
                    "<=" => matches!(ord, Some(Less | Equal)),
                    ">" => ord == Some(Greater),
                    _ => matches!(ord, Some(Greater | Equal)),
                })
            }
            Node::Arith(first, rest) => {
                let mut v = self.node(first, scope)?;
                for (op, x) in rest {
                    let r = self.node(x, scope)?;
                    v = match *op {
                        "+" if !(v.is_number() && r.is_number()) => {
                            // Bounded before it is built: `${s + s}` doubling at each transition
                            // reached hundreds of MB in one plan, refused only once made.
                            let (a, b) = (text_of(&v), text_of(&r));
                            if a.len() + b.len() > MAX_TEXT_BYTES {
                                return Err(too_long(expr, a.len() + b.len()));
                            }
                            Value::String(a + &b)
                        }
                        op => {
                            let (a, b) = (num(&v, expr)?, num(&r, expr)?);
                            if matches!(op, "/" | "%") && b == 0.0 {
                                return Err(format!("{expr:?}: division by zero"));
                            }
                            number(
                                match op {
                                    "+" => a + b,
                                    "-" => a - b,
                                    "*" => a * b,
                                    "/" => a / b,
                                    _ => a % b,
                                },
                                expr,
                            )?
                        }
                    };
                }
                v
            }
        })
    }
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

    /// One node for a chain, the operand alone when there is no operator.
    fn chain(
        &mut self,
        op: &str,
        wrap: fn(Vec<Node>) -> Node,
        next: fn(&mut Self) -> Result<Node, String>,
    ) -> Result<Node, String> {
        let mut list = vec![next(self)?];
        while self.eat(op) {
            list.push(next(self)?);
        }
        Ok(if list.len() == 1 {
            list.pop().ok_or("an empty chain")?
        } else {
            wrap(list)
        })
    }

    fn coalesce(&mut self) -> Result<Node, String> {
        self.chain("??", Node::Coalesce, Self::operand)
    }

    /// An operand of `??`: a bare name directly before `??` may be undefined (it reads as
    /// null); anything else is as everywhere, so a typo inside a larger expression still fails.
    fn operand(&mut self) -> Result<Node, String> {
        if let (Some(Tok::Name(n)), Some(Tok::Op("??"))) =
            (self.tokens.get(self.at), self.tokens.get(self.at + 1))
            && !matches!(n.as_str(), "true" | "false" | "null")
        {
            let n = n.clone();
            self.at += 1;
            return Ok(Node::Loose(n));
        }
        self.or()
    }

    fn or(&mut self) -> Result<Node, String> {
        self.chain("||", Node::Or, Self::and)
    }

    fn and(&mut self) -> Result<Node, String> {
        self.chain("&&", Node::And, Self::cmp)
    }

    /// One comparison at most: `a < b < c` is an error, not a surprise.
    fn cmp(&mut self) -> Result<Node, String> {
        let v = self.arith(&["+", "-"], Self::product)?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.eat(op) {
                let r = self.arith(&["+", "-"], Self::product)?;
                return Ok(Node::Cmp(op, Box::new(v), Box::new(r)));
            }
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<Node, String> {
        self.arith(&["*", "/", "%"], Self::unary)
    }

    fn arith(
        &mut self,
        ops: &[&'static str],
        next: fn(&mut Self) -> Result<Node, String>,
    ) -> Result<Node, String> {
        let first = next(self)?;
        let mut rest = Vec::new();
        while let Some(op) = ops.iter().find(|o| self.eat(o)) {
            rest.push((*op, next(self)?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Node::Arith(Box::new(first), rest)
        })
    }

    fn unary(&mut self) -> Result<Node, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "{:?}: nested more than {MAX_DEPTH} deep",
                self.expr
            ));
        }
        let v = if self.eat("!") {
            self.unary().map(|x| Node::Not(Box::new(x)))
        } else if self.eat("-") {
            self.unary().map(|x| Node::Neg(Box::new(x)))
        } else {
            self.atom()
        };
        self.depth -= 1;
        v
    }

    fn atom(&mut self) -> Result<Node, String> {
        let tok = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| format!("{:?}: ends too soon", self.expr))?;
        self.at += 1;
        Ok(match tok {
            Tok::Num(n) => Node::Lit(number(n, self.expr)?),
            Tok::Str(s) => Node::Lit(Value::String(s)),
            Tok::Name(n) => match n.as_str() {
                "true" => Node::Lit(Value::Bool(true)),
                "false" => Node::Lit(Value::Bool(false)),
                "null" => Node::Lit(Value::Null),
                "has" if self.eat("(") => {
                    let Some(Tok::Name(path)) = self.tokens.get(self.at).cloned() else {
                        return Err(format!("{:?}: has( takes a name", self.expr));
                    };
                    self.at += 1;
                    if !self.eat(")") {
                        return Err(format!("{:?}: has({path} without its )", self.expr));
                    }
                    Node::Has(path)
                }
                _ => Node::Name(n),
            },
            Tok::Op("(") => {
                let v = self.coalesce()?;
                if !self.eat(")") {
                    return Err(format!("{:?}: a ( without its )", self.expr));
                }
                v
            }
            Tok::Op(o) => return Err(format!("{:?}: unexpected {o:?}", self.expr)),
        })
    }
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
