//! Whether a keyword argument's value is certainly one its parameter accepts, as the runner's check judges
//! literals (checks.py: `literal`, `ToolSpec.wrong_literal`, `json_equal`, `is_type`).

use ruff_python_ast::{Expr, Number, UnaryOp};
use serde_json::Value;

use crate::signatures::Accepts;

/// What the runner's check makes of an argument.
enum Literal<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    Array,
    Object,
    /// A Python value of no JSON type (bytes, a complex number, `...`, a set).
    Untyped,
    /// No literal: the check leaves it to run time.
    Computed,
    /// A literal this side cannot evaluate exactly as `ast.literal_eval` would (a huge integer, `-True`,
    /// arithmetic).
    Unsure,
}

/// Whether the runner's check would find nothing wrong with `value` for a parameter that `accepts` it.
pub(super) fn is_accepted(value: &Expr, accepts: &Accepts) -> bool {
    if accepts.types.is_none() && accepts.values.is_none() {
        return true;
    }
    let literal = Literal::of(value);
    match literal {
        Literal::Computed => true,
        Literal::Unsure => false,
        _ => {
            accepts.values.as_ref().is_none_or(|values| values.iter().any(|allowed| literal.equals(allowed)))
                && accepts.types.as_ref().is_none_or(|types| literal.has_one_of(types))
        }
    }
}

/// Integers a float holds exactly: Python compares an int and a float exactly, so only these compare here.
const EXACT_IN_FLOAT: u64 = 1 << 53;

impl<'a> Literal<'a> {
    fn of(expr: &'a Expr) -> Literal<'a> {
        match expr {
            Expr::StringLiteral(string) => Literal::Str(string.value.to_str()),
            Expr::NumberLiteral(number) => Literal::number(&number.value, false),
            Expr::BooleanLiteral(boolean) => Literal::Bool(boolean.value),
            Expr::NoneLiteral(_) => Literal::Null,
            Expr::BytesLiteral(_) | Expr::EllipsisLiteral(_) | Expr::Set(_) => Literal::Untyped,
            Expr::List(_) | Expr::Tuple(_) => Literal::Array,
            Expr::Dict(_) => Literal::Object,
            Expr::UnaryOp(unary) => match (&unary.op, &*unary.operand) {
                (UnaryOp::USub, Expr::NumberLiteral(number)) => Literal::number(&number.value, true),
                (UnaryOp::UAdd, Expr::NumberLiteral(number)) => Literal::number(&number.value, false),
                (UnaryOp::USub | UnaryOp::UAdd, _) => Literal::Unsure,
                (UnaryOp::Not | UnaryOp::Invert, _) => Literal::Computed,
            },
            Expr::BinOp(_) => Literal::Unsure,
            _ => Literal::Computed,
        }
    }

    fn number(number: &Number, negated: bool) -> Literal<'a> {
        match number {
            Number::Int(int) => match int.as_i64() {
                Some(value) if negated => Literal::Int(-value),
                Some(value) => Literal::Int(value),
                None => Literal::Unsure,
            },
            Number::Float(value) => Literal::Float(if negated { -value } else { *value }),
            Number::Complex { .. } => Literal::Untyped,
        }
    }

    /// `json_equal`: True is not 1, 1 is 1.0. False whenever this side cannot tell.
    fn equals(&self, allowed: &Value) -> bool {
        match (self, allowed) {
            (Literal::Str(text), Value::String(allowed)) => text == allowed,
            (Literal::Bool(value), Value::Bool(allowed)) => value == allowed,
            (Literal::Null, Value::Null) => true,
            (Literal::Int(value), Value::Number(allowed)) => match allowed.as_i64() {
                Some(allowed) => *value == allowed,
                None => allowed.as_f64().is_some_and(|allowed| {
                    allowed.is_finite() && value.unsigned_abs() <= EXACT_IN_FLOAT && *value as f64 == allowed
                }),
            },
            (Literal::Float(value), Value::Number(allowed)) => match allowed.as_i64() {
                Some(allowed) => allowed.unsigned_abs() <= EXACT_IN_FLOAT && allowed as f64 == *value,
                None => allowed.is_f64() && allowed.as_f64() == Some(*value),
            },
            _ => false,
        }
    }

    /// `is_type` for one of `types`; a value of no JSON type is not checked.
    fn has_one_of(&self, types: &[&str]) -> bool {
        let actual = match self {
            Literal::Str(_) => "string",
            Literal::Int(_) => "integer",
            Literal::Float(_) => "number",
            Literal::Bool(_) => "boolean",
            Literal::Null => "null",
            Literal::Array => "array",
            Literal::Object => "object",
            Literal::Untyped => return true,
            Literal::Computed | Literal::Unsure => return false,
        };
        types.iter().any(|&expected| {
            expected == actual
                || (expected == "number" && actual == "integer")
                || (expected == "integer"
                    && matches!(self, Literal::Float(value) if value.is_finite() && value.fract() == 0.0))
        })
    }
}
