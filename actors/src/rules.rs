//! Rules: a playbook's decision from the signal and its subject's history, written in CEL (the
//! Common Expression Language). A rule's `when` is compiled once, when the configuration is
//! read, and checked there, since the CEL library has no type checker of its own: every
//! variable and function it names must exist, a `when` that is plainly not a bool is refused,
//! and its size is bounded (the cost limit: an evaluation walks a bounded tree, over a signal
//! bounded by the request size limit). Every `subject.decisions(...)` call has constant
//! arguments, so what it counts is known before evaluation: the caller reads those counts from
//! the decisions index (under the subject's keyed digest) and evaluation itself does no I/O.
//! The first rule whose `when` is true decides; a rule whose evaluation fails does not match,
//! and its failure is kept.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use cel::common::ast::{operators, CallExpr, Expr, LiteralValue, SourceInfo};
use cel::{Context, Env, IdedExpr, Value};
use idem_schemas::{RuleError, Verdict};
use serde_json::{Map, Value as Json};

use crate::action::Action;

/// The most nodes a `when` may have once its macros are expanded.
pub const MAX_NODES: usize = 256;

/// The most comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) one may nest.
pub const MAX_NESTING: usize = 2;

/// The longest a `when` may be, in bytes.
pub const MAX_WHEN: usize = 4096;

/// The most decisions `subject.decisions(...)` counts: past this, it answers this.
pub const MAX_COUNT: u64 = 10_000;

/// The standard functions a `when` may call, globally or on a value.
const FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "string",
    "int",
    "uint",
    "double",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "type",
    "dyn",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
];

/// The fields of `signal`.
const SIGNAL_FIELDS: &[&str] = &["type", "subject", "metadata", "source"];

/// The standard environment every `when` is compiled and evaluated in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A rule of a playbook (`[[tenants.<t>.playbooks.<type>.rules]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its name, unique in its playbook.
    pub name: String,
    /// When it decides.
    pub when: Condition,
    /// Its verdict.
    pub decision: Verdict,
    /// Its actions, in order.
    pub actions: Vec<Action>,
}

/// A compiled `when`.
#[derive(Clone)]
pub struct Condition {
    /// As written.
    source: String,
    /// As evaluated: each `subject.decisions(...)` call is a variable of its count.
    expr: IdedExpr,
    /// What each of those variables counts, in order.
    history: Vec<History>,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

impl Condition {
    /// The `subject.decisions(...)` calls it makes.
    pub fn history(&self) -> &[History] {
        &self.history
    }
}

/// What one `subject.decisions(...)` call counts: the subject's decisions of `signal_type`
/// (any type: `None`) made within `window` before this one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct History {
    /// Only this signal type's.
    pub signal_type: Option<String>,
    /// How far back.
    pub window: Duration,
}

/// What the history calls of some rules counted, by call.
pub type Counts = BTreeMap<History, u64>;

/// Every distinct history call of `rules`.
pub fn history_of(rules: &[Rule]) -> Vec<History> {
    let mut all: Vec<History> = rules
        .iter()
        .flat_map(|r| r.when.history.iter().cloned())
        .collect();
    all.sort();
    all.dedup();
    all
}

/// Why a `when` does not compile, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
    /// Why.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Compiles and checks `when`.
pub fn compile(when: &str) -> Result<Condition, CompileError> {
    if when.len() > MAX_WHEN {
        return Err(CompileError {
            line: 1,
            column: 1,
            message: format!("is longer than {MAX_WHEN} bytes"),
        });
    }
    let program = ENV.compile(when).map_err(|errors| {
        let first = errors.errors.first();
        CompileError {
            line: first.map_or(1, |e| e.pos.0.max(1) as usize),
            column: first.map_or(1, |e| e.pos.1.max(1) as usize),
            message: first.map_or_else(|| "does not parse".into(), |e| e.msg.clone()),
        }
    })?;
    let info = program.source_info();
    let mut checker = Checker {
        info,
        source: when,
        scope: Vec::new(),
        nodes: 0,
        nesting: 0,
        history: Vec::new(),
    };
    let mut expr = program.expression().clone();
    checker.check(&mut expr)?;
    if let Some(what) = not_bool(&expr) {
        return Err(checker.at(&expr, format!("is {what}, not a bool")));
    }
    Ok(Condition {
        source: when.to_string(),
        expr,
        history: checker.history,
    })
}

/// Walks a parsed `when`: checks what it names and its size, and turns each history call into
/// the variable of its count.
struct Checker<'a> {
    info: &'a SourceInfo,
    source: &'a str,
    /// The comprehensions' variables in scope.
    scope: Vec<String>,
    nodes: usize,
    nesting: usize,
    history: Vec<History>,
}

impl Checker<'_> {
    /// An error at `expr`'s position: where the first of its terms is written.
    fn at(&self, expr: &IdedExpr, message: impl Into<String>) -> CompileError {
        let offset = first_offset(self.info, expr).unwrap_or(0);
        let (line, column) = line_column(self.source, offset as usize);
        CompileError {
            line,
            column,
            message: message.into(),
        }
    }

    fn check(&mut self, expr: &mut IdedExpr) -> Result<(), CompileError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.at(expr, format!("has more than {MAX_NODES} terms")));
        }
        if let Some(count) = self.history_call(expr)? {
            expr.expr = Expr::Ident(count);
            return Ok(());
        }
        let at = expr.clone();
        match &mut expr.expr {
            Expr::Unspecified | Expr::Literal(_) => Ok(()),
            Expr::Ident(name) => self.variable(&at, name, None),
            Expr::Select(select) => {
                if let Expr::Ident(name) = &select.operand.expr {
                    let name = name.clone();
                    return self.variable(&at, &name, Some(&select.field));
                }
                self.check(&mut select.operand)
            }
            Expr::Call(call) => {
                self.function(&at, call)?;
                if let Some(target) = call.target.as_deref_mut() {
                    self.check(target)?;
                }
                call.args.iter_mut().try_for_each(|a| self.check(a))
            }
            Expr::List(list) => list.elements.iter_mut().try_for_each(|e| self.check(e)),
            Expr::Map(map) => map
                .entries
                .iter_mut()
                .try_for_each(|entry| match &mut entry.expr {
                    cel::common::ast::EntryExpr::MapEntry(e) => {
                        self.check(&mut e.key)?;
                        self.check(&mut e.value)
                    }
                    cel::common::ast::EntryExpr::StructField(f) => self.check(&mut f.value),
                }),
            Expr::Struct(_) => {
                Err(self.at(&at, "has a message literal: there are no types to make"))
            }
            Expr::Comprehension(c) => {
                self.nesting += 1;
                if self.nesting > MAX_NESTING {
                    return Err(self.at(
                        &at,
                        format!(
                            "nests more than {MAX_NESTING} of all, exists, exists_one, map, filter"
                        ),
                    ));
                }
                self.check(&mut c.iter_range)?;
                let vars = [
                    Some(c.iter_var.clone()),
                    c.iter_var2.clone(),
                    Some(c.accu_var.clone()),
                ];
                let before = self.scope.len();
                self.scope.extend(vars.into_iter().flatten());
                self.check(&mut c.accu_init)?;
                self.check(&mut c.loop_cond)?;
                self.check(&mut c.loop_step)?;
                self.check(&mut c.result)?;
                self.scope.truncate(before);
                self.nesting -= 1;
                Ok(())
            }
        }
    }

    /// `name` (with `field` selected on it, if it is): a variable there is.
    fn variable(
        &mut self,
        at: &IdedExpr,
        name: &str,
        field: Option<&str>,
    ) -> Result<(), CompileError> {
        if self.scope.iter().any(|v| v == name) {
            return Ok(());
        }
        match (name, field) {
            ("now", _) | ("signal", None) => Ok(()),
            ("signal", Some(field)) if SIGNAL_FIELDS.contains(&field) => Ok(()),
            ("signal", Some(field)) => Err(self.at(
                at,
                format!("unknown variable signal.{field}: signal has type, subject, metadata, source"),
            )),
            ("subject", _) => Err(self.at(
                at,
                "subject is only used as subject.decisions(type, window) or subject.decisions(window)",
            )),
            (name, _) => Err(self.at(
                at,
                format!("unknown variable {name}: the variables are signal and now"),
            )),
        }
    }

    /// A call: an operator or a standard function.
    fn function(&self, at: &IdedExpr, call: &CallExpr) -> Result<(), CompileError> {
        let name = call.func_name.as_str();
        let operator = name.starts_with('_')
            || name.starts_with('!')
            || name.starts_with('-')
            || name == operators::IN
            || name == operators::NOT_STRICTLY_FALSE;
        if operator || FUNCTIONS.contains(&name) {
            return Ok(());
        }
        Err(self.at(at, format!("unknown function {name}")))
    }

    /// If `expr` is `subject.decisions(...)`, the variable of its count; a call of it with
    /// other than constant arguments is refused.
    fn history_call(&mut self, expr: &IdedExpr) -> Result<Option<String>, CompileError> {
        let Expr::Call(call) = &expr.expr else {
            return Ok(None);
        };
        let on_subject = matches!(
            call.target.as_deref().map(|t| &t.expr),
            Some(Expr::Ident(name)) if name == "subject" && !self.scope.iter().any(|v| v == "subject")
        );
        if !on_subject {
            return Ok(None);
        }
        if call.func_name != "decisions" {
            return Err(self.at(
                expr,
                format!("unknown function subject.{}: subject has decisions(type, window) and decisions(window)", call.func_name),
            ));
        }
        let (signal_type, window) = match call.args.as_slice() {
            [window] => (None, window),
            [signal_type, window] => match &signal_type.expr {
                Expr::Literal(LiteralValue::String(s)) => (Some(s.inner().to_string()), window),
                _ => {
                    return Err(self.at(
                        signal_type,
                        "subject.decisions takes a signal type written as a string",
                    ))
                }
            },
            _ => return Err(self.at(expr, "subject.decisions takes (type, window) or (window)")),
        };
        let window = self.window(window)?;
        self.history.push(History {
            signal_type,
            window,
        });
        Ok(Some(format!("#history{}", self.history.len() - 1)))
    }

    /// A window: `duration("72h")`, a constant longer than zero.
    fn window(&self, expr: &IdedExpr) -> Result<Duration, CompileError> {
        let refuse = || {
            self.at(
                expr,
                "a window of subject.decisions is written duration(\"...\"), e.g. duration(\"72h\")",
            )
        };
        let Expr::Call(call) = &expr.expr else {
            return Err(refuse());
        };
        let constant = call.func_name == "duration"
            && call.target.is_none()
            && matches!(
                call.args.as_slice(),
                [IdedExpr {
                    expr: Expr::Literal(LiteralValue::String(_)),
                    ..
                }]
            );
        if !constant {
            return Err(refuse());
        }
        let context = Context::with_env(ENV.clone());
        match context.resolve(expr) {
            Ok(Value::Duration(d)) if d > chrono::TimeDelta::zero() => {
                d.to_std().map_err(|_| refuse())
            }
            Ok(_) => Err(self.at(expr, "a window must be longer than zero")),
            Err(e) => Err(self.at(expr, e.to_string())),
        }
    }
}

/// Where the first term of `expr` is written: the least offset of its nodes (an operator's
/// own is that of its symbol, after its first operand).
fn first_offset(info: &SourceInfo, expr: &IdedExpr) -> Option<u32> {
    let mut own = info.offset_for(expr.id).map(|(start, _)| start);
    // A function's call is placed at its `(`, its name just before.
    if let Expr::Call(call) = &expr.expr {
        if call.target.is_none() && call.func_name.starts_with(|c: char| c.is_alphabetic()) {
            own = own.map(|at| at.saturating_sub(call.func_name.chars().count() as u32));
        }
    }
    let first = |e: &IdedExpr| first_offset(info, e);
    let children = match &expr.expr {
        Expr::Select(s) => first(&s.operand),
        Expr::Call(c) => c.target.as_deref().or(c.args.first()).and_then(first),
        _ => None,
    };
    match (own, children) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What `expr` is when it plainly is not a bool, as far as its shape tells.
fn not_bool(expr: &IdedExpr) -> Option<&'static str> {
    match &expr.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => None,
        Expr::Literal(LiteralValue::Null) => Some("null"),
        Expr::Literal(LiteralValue::String(_)) => Some("a string"),
        Expr::Literal(LiteralValue::Bytes(_)) => Some("bytes"),
        Expr::Literal(LiteralValue::Int(_) | LiteralValue::UInt(_)) => Some("a number"),
        Expr::Literal(LiteralValue::Double(_)) => Some("a number"),
        Expr::List(_) => Some("a list"),
        Expr::Map(_) => Some("a map"),
        Expr::Ident(name) if name == "now" => Some("a timestamp"),
        Expr::Ident(name) if name == "signal" => Some("a map"),
        Expr::Ident(name) if name.starts_with("#history") => Some("a number"),
        Expr::Select(s)
            if !s.test && matches!(&s.operand.expr, Expr::Ident(n) if n == "signal") =>
        {
            match s.field.as_str() {
                "type" => Some("a string"),
                "metadata" => Some("a map"),
                _ => None,
            }
        }
        Expr::Call(call) => match call.func_name.as_str() {
            operators::CONDITIONAL => call.args.get(1..).and_then(|branches| {
                let whats: Vec<_> = branches.iter().map(not_bool).collect();
                whats
                    .iter()
                    .all(Option::is_some)
                    .then(|| whats[0])
                    .flatten()
            }),
            operators::ADD
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE => Some("arithmetic"),
            "size" | "int" | "uint" | "double" => Some("a number"),
            "string" => Some("a string"),
            "bytes" => Some("bytes"),
            "duration" => Some("a duration"),
            "timestamp" => Some("a timestamp"),
            "type" => Some("a type"),
            name if name.starts_with("get") => Some("a number"),
            _ => None,
        },
        _ => None,
    }
}

/// The 1-based line and column (in characters) of the character at `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let (mut line, mut column) = (1, 1);
    for c in text.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// What rules are evaluated over: the signal, and when.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The signal type.
    pub signal_type: &'a str,
    /// The subject, as the signal names it.
    pub subject: &'a str,
    /// The signal's metadata.
    pub metadata: &'a Map<String, Json>,
    /// The source it came from, if any: its name, kind and event type.
    pub source: Option<&'a SourceOf>,
    /// Now, unix milliseconds.
    pub now_ms: u64,
}

/// The source a signal came from, as `signal.source` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceOf {
    /// Its name under the tenant's sources.
    pub name: String,
    /// Its kind (`stripe`, `ssf`, ...).
    pub kind: String,
    /// The provider's event type.
    pub event_type: String,
}

/// Which rule decided, if any, and the rules whose evaluation failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// The index of the rule that decided; `None`: the playbook's default.
    pub matched: Option<usize>,
    /// The failures, in rule order.
    pub errors: Vec<RuleError>,
}

/// Evaluates `rules` in order over `input` with the history `counts` (every history call of the
/// rules counted; one missing counts zero): the first whose `when` is true decides.
pub fn evaluate(rules: &[Rule], input: Input<'_>, counts: &Counts) -> Evaluation {
    let mut evaluation = Evaluation::default();
    if rules.is_empty() {
        return evaluation;
    }
    let signal = signal_value(input);
    let now = chrono::DateTime::from_timestamp_millis(input.now_ms as i64)
        .unwrap_or_default()
        .fixed_offset();
    for (n, rule) in rules.iter().enumerate() {
        let mut context = Context::with_env(ENV.clone());
        context.add_variable_from_value("signal", signal.clone());
        context.add_variable_from_value("now", Value::Timestamp(now));
        for (i, call) in rule.when.history.iter().enumerate() {
            let count = counts.get(call).copied().unwrap_or(0).min(MAX_COUNT);
            context.add_variable_from_value(format!("#history{i}"), Value::Int(count as i64));
        }
        match context.resolve(&rule.when.expr) {
            Ok(Value::Bool(true)) => {
                evaluation.matched = Some(n);
                break;
            }
            Ok(Value::Bool(false)) => {}
            Ok(other) => evaluation.errors.push(RuleError {
                rule: rule.name.clone(),
                message: format!("when gave {:?}, not a bool", other.type_of()),
            }),
            Err(e) => evaluation.errors.push(RuleError {
                rule: rule.name.clone(),
                message: e.to_string(),
            }),
        }
    }
    evaluation
}

/// `signal`, as the rules see it.
fn signal_value(input: Input<'_>) -> Value {
    let mut signal = Map::new();
    signal.insert("type".into(), input.signal_type.into());
    // A subject identifier object is digested in its canonical JSON: the rules see the object.
    let subject = match input.subject.starts_with('{') {
        true => serde_json::from_str::<Json>(input.subject)
            .ok()
            .filter(Json::is_object)
            .unwrap_or_else(|| input.subject.into()),
        false => input.subject.into(),
    };
    signal.insert("subject".into(), subject);
    signal.insert("metadata".into(), Json::Object(input.metadata.clone()));
    let source = input.source.map_or(
        Json::Null,
        |s| serde_json::json!({"name": s.name, "kind": s.kind, "event_type": s.event_type}),
    );
    signal.insert("source".into(), source);
    cel::to_value(Json::Object(signal)).unwrap_or(Value::Null)
}

/// The history of `Counts` as `history` entries say it, each an earlier decision of a type
/// made `ago` before now: what a playbook's tests give its rules.
pub fn counts_of(calls: &[History], history: &[(Option<String>, Duration)]) -> Counts {
    calls
        .iter()
        .map(|call| {
            let n = history
                .iter()
                .filter(|(t, ago)| {
                    *ago <= call.window
                        && call
                            .signal_type
                            .as_ref()
                            .is_none_or(|want| t.as_ref() == Some(want))
                })
                .count();
            (call.clone(), n as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, when: &str) -> Rule {
        Rule {
            name: name.into(),
            when: compile(when).expect("compiles"),
            decision: Verdict::Deny,
            actions: Vec::new(),
        }
    }

    fn input<'a>(metadata: &'a Map<String, Json>) -> Input<'a> {
        Input {
            signal_type: "sim_swap",
            subject: "+447700900123",
            metadata,
            source: None,
            now_ms: 1_795_888_472_123,
        }
    }

    #[test]
    fn refuses_with_the_position() {
        let e = compile("signal.metadata.risk >= ").expect_err("syntax");
        assert_eq!((e.line, e.column), (1, 25), "{e}");
        let e = compile("signal.type ==\n == 'a'").expect_err("syntax");
        assert_eq!((e.line, e.column), (2, 2), "{e}");
        let e = compile("signal.type == 'a' &&\n  risk > 3").expect_err("unknown");
        assert_eq!((e.line, e.column), (2, 3), "{e}");
        assert!(e.message.contains("unknown variable risk"), "{e}");
        let e = compile("signal.nope == 1").expect_err("unknown field");
        assert!(e.message.contains("signal.nope"), "{e}");
        let e = compile("frobnicate(signal.type)").expect_err("unknown function");
        assert!(e.message.contains("unknown function frobnicate"), "{e}");
        assert_eq!((e.line, e.column), (1, 1), "{e}");
        let e = compile("size(signal.type) + 1").expect_err("not a bool");
        assert!(e.message.contains("not a bool"), "{e}");
        let e = compile("subject.decisions(signal.type, duration('1h')) > 0").expect_err("const");
        assert_eq!((e.line, e.column), (1, 19), "{e}");
        let e = compile("subject.decisions('a', duration(signal.type)) > 0").expect_err("window");
        assert!(e.message.contains("duration("), "{e}");
        let deep = "[1].all(a, [1].all(b, [1].all(c, true)))";
        assert!(compile(deep).expect_err("nested").message.contains("nests"));
        let long = vec!["true"; MAX_NODES].join(" && ");
        assert!(compile(&long).expect_err("big").message.contains("terms"));
    }

    #[test]
    fn first_match_wins_and_failures_are_kept() {
        let rules = [
            rule("missing", "signal.metadata.risk >= 90"),
            rule("recent", "subject.decisions('breach', duration('72h')) > 0"),
            rule("any", "subject.decisions(duration('1h')) >= 0"),
        ];
        let calls = history_of(&rules);
        assert_eq!(calls.len(), 2);
        let none = Map::new();
        let history = [(Some("breach".to_string()), Duration::from_secs(5 * 3600))];
        let e = evaluate(&rules, input(&none), &counts_of(&calls, &history));
        assert_eq!(e.matched, Some(1));
        assert_eq!(e.errors.len(), 1);
        assert_eq!(e.errors[0].rule, "missing");
        let old = [(Some("breach".to_string()), Duration::from_secs(73 * 3600))];
        let e = evaluate(&rules, input(&none), &counts_of(&calls, &old));
        assert_eq!(e.matched, Some(2));
        let mut risky = Map::new();
        risky.insert("risk".into(), 95.into());
        let e = evaluate(&rules, input(&risky), &Counts::new());
        assert_eq!((e.matched, e.errors.len()), (Some(0), 0));
    }

    #[test]
    fn sees_the_signal_and_now() {
        let rules = [rule(
            "all",
            "has(signal.metadata.risk) && signal.source == null && signal.subject.startsWith('+44') \
             && now > timestamp('2020-01-01T00:00:00Z') && signal.type == 'sim_swap'",
        )];
        let mut risky = Map::new();
        risky.insert("risk".into(), 1.into());
        let e = evaluate(&rules, input(&risky), &Counts::new());
        assert_eq!(
            e,
            Evaluation {
                matched: Some(0),
                errors: vec![]
            }
        );
    }

    #[test]
    fn sees_a_subject_identifier_as_an_object() {
        let rules = [rule("email", "signal.subject.format == 'email'")];
        let none = Map::new();
        let subject = r#"{"email":"a@example.com","format":"email"}"#;
        let e = evaluate(
            &rules,
            Input {
                subject,
                ..input(&none)
            },
            &Counts::new(),
        );
        assert_eq!(e.matched, Some(0), "{e:?}");
    }
}
