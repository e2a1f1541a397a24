//! The walk over a parsed program: each rule of the runner's check (backends/src/checks.py, `Precheck`),
//! kept only in the form that cannot be wrong, so a walk that finds nothing proves that check would find
//! nothing either.

use ruff_python_ast::visitor::{Visitor, walk_comprehension, walk_expr, walk_pattern, walk_stmt};
use ruff_python_ast::{Comprehension, Expr, ExprCall, ExprContext, Pattern, Stmt};

use super::literal;
use crate::naming::PREFIX;
use crate::registry::Catalog;
use crate::signatures::Signature;

/// Deeper nesting is left to the runner (programs people write are far shallower): it bounds this walk's
/// recursion, so the check thread's stack only has to hold the parser's.
const MAX_DEPTH: usize = 200;

pub(super) struct Soundness<'c> {
    catalog: &'c Catalog,
    sound: bool,
    /// How many `mcp__` names the program reads.
    tool_names_read: usize,
    /// Statements, expressions and patterns the walk is inside.
    depth: usize,
}

impl<'c> Soundness<'c> {
    pub(super) fn new(catalog: &'c Catalog) -> Self {
        Soundness { catalog, sound: true, tool_names_read: 0, depth: 0 }
    }

    pub(super) fn is_sound(&self) -> bool {
        self.sound
    }

    pub(super) fn tool_names_read(&self) -> usize {
        self.tool_names_read
    }

    /// A call of a tool by its name, with every argument a keyword the tool takes (or `**`), no required
    /// one missing (unless `**` may bring it) and every literal value one the tool accepts.
    fn check_call(&mut self, tool: &Signature, call: &ExprCall) {
        // Positional arguments (starred or not) are the runner's to word.
        if !call.arguments.args.is_empty() {
            self.sound = false;
            return;
        }
        let mut double_starred = false;
        for keyword in &call.arguments.keywords {
            let Some(name) = &keyword.arg else {
                double_starred = true;
                continue;
            };
            match tool.params.iter().find(|param| param.name == name.as_str()) {
                Some(param) if !literal::is_accepted(&keyword.value, &param.accepts) => self.sound = false,
                Some(_) => {}
                None if tool.extra.is_none() => self.sound = false,
                None => {}
            }
        }
        let given = |name: &str| call.arguments.keywords.iter().any(|k| k.arg.as_ref().is_some_and(|a| a == name));
        if !double_starred && tool.params.iter().any(|param| param.required && !given(&param.name)) {
            self.sound = false;
        }
    }

    /// `walk` one level down, unless that is deeper than [`MAX_DEPTH`].
    fn deeper(&mut self, walk: impl FnOnce(&mut Self)) {
        if self.depth == MAX_DEPTH {
            self.sound = false;
            return;
        }
        self.depth += 1;
        walk(self);
        self.depth -= 1;
    }
}

/// Whether `expr` calls a name that looks like a tool (`mcp__...(...)`), whose coroutine must be awaited.
fn is_tool_call(expr: &Expr) -> bool {
    matches!(expr, Expr::Call(call) if matches!(&*call.func, Expr::Name(name) if name.id.starts_with(PREFIX)))
}

impl<'a> Visitor<'a> for Soundness<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if !self.sound {
            return;
        }
        // A tool call's coroutine where it is certainly never awaited (a statement of its own, iterated), or
        // bound to a name (the runner follows the name through the program).
        let unawaited = match stmt {
            Stmt::Expr(statement) => Some(&*statement.value),
            Stmt::Assign(assign) => Some(&*assign.value),
            Stmt::AnnAssign(assign) => assign.value.as_deref(),
            Stmt::For(for_loop) => Some(&*for_loop.iter),
            _ => None,
        };
        if unawaited.is_some_and(is_tool_call) {
            self.sound = false;
            return;
        }
        self.deeper(|walk| walk_stmt(walk, stmt));
    }

    fn visit_comprehension(&mut self, comprehension: &'a Comprehension) {
        if is_tool_call(&comprehension.iter) {
            self.sound = false;
        }
        if self.sound {
            walk_comprehension(self, comprehension);
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if !self.sound {
            return;
        }
        match expr {
            Expr::Name(name) if name.id.starts_with(PREFIX) => {
                // Read and callable; anything else (bound, deleted, no tool) is the runner's to judge.
                self.tool_names_read += 1;
                if name.ctx != ExprContext::Load || !self.catalog.tools.contains_key(name.id.as_str()) {
                    self.sound = false;
                }
            }
            Expr::Call(call) => {
                if let Expr::Name(name) = &*call.func
                    && let Some(entry) = self.catalog.tools.get(name.id.as_str())
                {
                    self.check_call(entry.signature(), call);
                }
            }
            // Subscripted or an attribute read: the coroutine's, not the result's.
            Expr::Subscript(subscript) if is_tool_call(&subscript.value) => self.sound = false,
            Expr::Attribute(attribute) if is_tool_call(&attribute.value) => self.sound = false,
            _ => {}
        }
        if self.sound {
            self.deeper(|walk| walk_expr(walk, expr));
        }
    }

    fn visit_pattern(&mut self, pattern: &'a Pattern) {
        if self.sound {
            self.deeper(|walk| walk_pattern(walk, pattern));
        }
    }
}
