"""ptc-mcp runner, part 1: what a tool call must look like, checked before the program runs and at each call.

Embedded in front of runner.py (one source for `python -c`); stdlib only, Python 3.9+, and importable alone
(`import checks`) for its tests and the benchmark. It keeps no state and runs no program code.

* `Toolbox` holds the tools of one run as the server describes them (PROTOCOL.md, `run`): each tool's
  keyword parameters, which it builds an `inspect.Signature` from, and why names that are no tool are not.
* `ToolSpec.bind` checks one call's arguments: a positional, unknown or missing argument is a TypeError
  naming the tool, the argument, the closest valid name and the signature; nothing is sent.
* `precheck` reads the program's syntax tree before it runs and reports, one finding a line, every statically
  visible call that cannot work: unknown tools, unknown or missing keywords, positional arguments, literal
  arguments of the wrong JSON type or outside an enum, and calls whose coroutine is never awaited. It only
  reports what is certain: anything dynamic (`**kwargs`, `*args`, names rebound or reached through
  `globals()`, calls inside `try` blocks that catch NameError) is left to run time.
"""
import ast
import difflib
import gc
import inspect
import re


# Attributes a program may use on an un-awaited coroutine on purpose.
COROUTINE_ATTRIBUTES = {"send", "throw", "close", "__await__", "cr_await", "cr_frame", "cr_running", "cr_code",
                        "cr_origin", "cr_suspended", "__name__", "__qualname__", "__class__"}
# Calls that may rebind or create globals behind the syntax tree's back.
DYNAMIC_NAMES = {"globals", "exec", "eval", "vars", "locals", "__import__", "setattr", "importlib"}
DYNAMIC_WORDS = re.compile(r"\b(?:" + "|".join(DYNAMIC_NAMES) + r")\b")
JSON_TYPES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
              "null": "null (None)", "array": "an array (list)", "object": "an object (dict)"}


class Annotation:
    """An annotation shown as its Python text (`Literal["a", "b"]`), not as a quoted string."""
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


class Omitted:
    """The default of an optional parameter without one: the key is left out of the call."""
    __slots__ = ()

    def __repr__(self):
        return "..."


OMITTED = Omitted()


class ToolSpec:
    """One tool's parameters (`run` message, `tools[i]`) and the checks of a call against them."""

    def __init__(self, spec):
        self.name = spec["name"]
        self.params = spec["params"]
        self.by_name = {p["name"]: p for p in self.params}
        self.keys = {p.get("key", p["name"]): p for p in self.params}
        self.extra = spec.get("extra")  # {"name", "annotation"} of `**extra`, if the tool takes more keys
        self.doc = spec.get("doc") or f"async def {self.name}(**kwargs) -> Any"
        self.required = [p["name"] for p in self.params if p["required"]]
        self.signature = self._signature(spec.get("returns", "Any"))

    def _signature(self, returns):
        try:
            parameters = [inspect.Parameter(p["name"], inspect.Parameter.KEYWORD_ONLY,
                                            annotation=Annotation(p["annotation"]),
                                            default=inspect.Parameter.empty if p["required"]
                                            else p.get("default", OMITTED))
                          for p in self.params]
            if self.extra is not None:
                parameters.append(inspect.Parameter(self.extra["name"], inspect.Parameter.VAR_KEYWORD,
                                                    annotation=Annotation(self.extra["annotation"])))
            return inspect.Signature(parameters, return_annotation=Annotation(returns))
        except (ValueError, TypeError):  # a name Python cannot take: the call checks still apply
            return inspect.Signature([inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])

    def text(self):
        return f"{self.name}{self.signature}"

    def bind(self, args, kwargs):
        """The call's arguments under the keys the server expects; TypeError if they cannot be right."""
        if args:
            raise TypeError(self.positional(len(args)))
        arguments = {}
        for name, value in kwargs.items():
            param = self.by_name.get(name) or self.keys.get(name)  # `**{"from": 1}` names a key itself
            if param is None and self.extra is None:
                raise TypeError(self.unknown(name))
            arguments[param.get("key", param["name"]) if param else name] = value
        missing = [name for name in self.required if self.by_name[name].get("key", name) not in arguments]
        if missing:
            raise TypeError(self.missing(missing))
        return arguments

    def positional(self, count):
        plural = "" if count == 1 else "s"
        return f"{self.name}() takes keyword arguments only (got {count} positional argument{plural}). " \
               f"Signature: {self.text()}"

    def closest(self, name):
        """The parameter a misspelt keyword most likely meant, or None."""
        close = difflib.get_close_matches(name, list(self.by_name), n=1, cutoff=0.6)
        return close[0] if close else None

    def unknown(self, name):
        close = self.closest(name)
        hint = f" Did you mean '{close}'?" if close else ""
        return f"{self.name}() got an unexpected keyword argument '{name}'.{hint} Signature: {self.text()}"

    def missing(self, names):
        quoted = [f"'{n}'" for n in names]
        listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
        plural = "" if len(names) == 1 else "s"
        return f"{self.name}() missing required keyword argument{plural} {listed}. Signature: {self.text()}"

    def wrong_literal(self, name, value):
        """Why a literal `value` for parameter `name` cannot be right, or None."""
        param = self.by_name.get(name)
        if param is None:
            return None
        values, types = param.get("values"), param.get("types")
        if values is not None and not any(json_equal(value, allowed) for allowed in values):
            shown = ", ".join(repr(v) for v in values[:10]) + (", ..." if len(values) > 10 else "")
            close = difflib.get_close_matches(value, [v for v in values if type(v) is str], n=1) \
                if type(value) is str else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return f"{self.name}({name}={value!r}): not one of {shown}{hint}"
        if types is not None and json_type(value) is not None and not any(is_type(value, t) for t in types):
            expected = " or ".join(JSON_TYPES.get(t, t) for t in types)
            return f"{self.name}({name}={short_repr(value)}): {JSON_TYPES[json_type(value)]}, but the tool expects " \
                   f"{expected}"
        return None


class Toolbox:
    """The tools of one run, and why other `mcp__` names are not callable."""

    def __init__(self, tools, not_callable, down):
        self.tools = {}
        for spec in tools:
            tool = ToolSpec(spec)
            self.tools[tool.name] = tool
        self.not_callable = not_callable  # name -> why (filtered out, collided)
        self.down = down  # "mcp__<server>__" -> "server 'x' is unavailable: ..."

    def why_unknown(self, name):
        """Why `name` is no callable tool, in words: blocked, its server down, or not a tool (closest names)."""
        if name in self.not_callable:
            return f"'{name}' is not callable: {self.not_callable[name]}"
        for prefix, why in self.down.items():
            if name.startswith(prefix):
                return f"'{name}' is not callable now: its {why}"
        close = closest_tools(name, list(self.tools))
        if close:
            return f"'{name}' is not a tool; did you mean {' or '.join(repr(c) for c in close)}?"
        return f"'{name}' is not a tool; list_callable_tools() lists them"


def closest_tools(name, names):
    """Up to three tool names close to `name`: its server's tools compared on the tool part (their shared
    prefix would make every one look close), else any tool compared whole."""
    server, _, tool = name[len("mcp__"):].partition("__")
    prefix = f"mcp__{server}__"
    same_server = {n[len(prefix):]: n for n in names if n.startswith(prefix)}
    if tool and same_server:
        close = difflib.get_close_matches(tool, list(same_server), n=3, cutoff=0.6)
        if close:
            return [same_server[c] for c in close]
    return difflib.get_close_matches(name, names, n=3, cutoff=0.75)


def json_type(value):
    if value is None:
        return "null"
    kind = type(value)
    if kind is bool:
        return "boolean"
    if kind is int:
        return "integer"
    if kind is float:
        return "number"
    if kind is str:
        return "string"
    if kind in (list, tuple):
        return "array"
    if kind is dict:
        return "object"
    return None


def is_type(value, expected):
    actual = json_type(value)
    return actual == expected or (expected == "number" and actual == "integer") or \
        (expected == "integer" and actual == "number" and float(value).is_integer())


def json_equal(a, b):
    """Equality of JSON values: True is not 1, 1 is 1.0."""
    if (type(a) is bool) != (type(b) is bool):
        return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) in (int, float, str, type(None), bool) and a == b


def short_repr(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the check before the program runs -----------------------------------------------------------------

def precheck(code, toolbox):
    """(findings, tree): every certain mistake in the program's tool calls, as `line L: ...` strings in line
    order, and the program's syntax tree for compiling it (parsed once for both). ([], None) when the program
    does not parse: running it reports the SyntaxError as usual."""
    # The tree is thousands of new objects and not one cycle: collections while it is built and read would
    # only walk it again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parse_and_check(code, toolbox)
    finally:
        if collecting:
            gc.enable()


def parse_and_check(code, toolbox):
    try:
        tree = ast.parse(code, "<program>")
    except Exception:  # SyntaxError, or a program too deep or too large for the parser
        return [], None
    text = as_python_reads_names(code)
    if "mcp__" not in text:  # no tool, nothing to check
        return [], tree
    # Only statements that mention a tool need a look (the walk is most of the cost), unless the program may
    # reach names dynamically: then everything counts.
    marked = None if may_reach_names_dynamically(text) else [("mcp__" in line) for line in source_lines(text)]
    return Precheck(toolbox, marked).run(tree), tree


def as_python_reads_names(code):
    """`code` with its identifiers as Python reads them: NFKC-normalised (a fullwidth `ｍcp__` is `mcp__`, `ｅｘｅｃ`
    is `exec`). Normalising the whole text does that, keeps its lines and every `mcp__` it had."""
    if code.isascii():
        return code
    import unicodedata  # only for the rare program with a character outside ASCII
    return unicodedata.normalize("NFKC", code)


def may_reach_names_dynamically(code):
    # A plain search for each word first: the regex alone costs a tenth of the whole check.
    return any(name in code for name in DYNAMIC_NAMES) and DYNAMIC_WORDS.search(code) is not None


def source_lines(code):
    """The lines as the syntax tree numbers them: a lone carriage return ends one too, as in the tokenizer."""
    return code.split("\n") if "\r" not in code else re.split(r"\r\n|\r|\n", code)


# Fields that never hold a node worth visiting: names and operators (a Load/Store context or an operator is a
# node of its own, and every Name has one: skipping them saves a third of the walk).
SKIPPED_FIELDS = {"ctx", "op", "ops", "id", "arg", "attr", "name", "names", "module", "level", "kind",
                  "conversion", "is_async", "type_comment", "type_ignores", "asname", "rest"}
CHILD_FIELDS = {}  # node class -> the fields of it to visit
# The kinds of node `Precheck.note_binding` looks at besides names, calls and constants (pattern captures are
# 3.10+).
BINDING_KINDS = {ast.Attribute, ast.arg, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.FunctionDef,
                 ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler} | \
    {getattr(ast, name) for name in ("MatchAs", "MatchStar", "MatchMapping") if hasattr(ast, name)}


def child_fields(kind):
    fields = CHILD_FIELDS.get(kind)
    if fields is None:
        fields = CHILD_FIELDS[kind] = () if kind is ast.Constant else \
            tuple(f for f in kind._fields if f not in SKIPPED_FIELDS)
    return fields


class Precheck:
    def __init__(self, toolbox, marked):
        self.toolbox = toolbox
        self.tree = None
        # Whether each line (from 0) mentions `mcp__`; None: look at every statement. A statement that does not
        # mention a tool can neither call one nor bind an `mcp__` name, so the first pass skips it; the names a
        # tool call is assigned to are then followed through the whole program (`whole_program`).
        self.marked = marked
        self.complete = marked is None
        self.parents = {}  # Name and Call nodes -> the node each is in
        self.bindings = {}  # name -> how many times the program binds it
        self.loads = {}  # name -> the nodes that read it
        self.strings = set()  # string constants, for names a program looks up by name
        self.dynamic = False  # the program reaches globals by name (globals(), exec, ...)
        self.findings = []

    def run(self, tree):
        self.tree = tree
        roots = [tree] if self.marked is None else [s for s in tree.body if self.mentions_a_tool(s)]
        calls = self.index(roots)
        for node in self.loads_of_tools():
            self.check_name(node)
        for call in calls:
            self.check_call(call)
        self.findings.sort(key=lambda finding: finding[:2])
        unique = []
        for _, _, text in self.findings:
            if text not in unique:
                unique.append(text)
        return unique

    def mentions_a_tool(self, statement):
        first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())])
        return any(self.marked[first - 1:statement.end_lineno])

    def whole_program(self):
        """Bindings and loads of every name in the program (the first pass may have skipped statements)."""
        if not self.complete:
            self.bindings.clear()
            self.loads.clear()
            self.index([self.tree])
            self.complete = True

    def index(self, roots):
        """One pass: bindings, loads, string constants, the calls of tools, and the parents of names and calls.
        (A stack of nodes, parents noted only where needed: this walk is most of the check's cost.)"""
        calls = []
        stack = list(roots)
        push, pop = stack.append, stack.pop
        parents, loads, bind = self.parents, self.loads, self.bind
        node_class, name_class, call_class, load_class = ast.AST, ast.Name, ast.Call, ast.Load
        noted = {name_class, call_class}
        while stack:
            node = pop()
            kind = node.__class__
            fields = CHILD_FIELDS.get(kind)
            for field in child_fields(kind) if fields is None else fields:
                value = getattr(node, field, None)
                if value.__class__ is list:
                    for child in value:
                        if isinstance(child, node_class):
                            push(child)
                            if child.__class__ in noted:
                                parents[child] = node
                elif isinstance(value, node_class):
                    push(value)
                    if value.__class__ in noted:
                        parents[value] = node
            if kind is name_class:
                if node.ctx.__class__ is load_class:
                    loads.setdefault(node.id, []).append(node)
                    if node.id in DYNAMIC_NAMES:
                        self.dynamic = True
                else:
                    bind(node.id)
            elif kind is call_class:
                if node.func.__class__ is name_class and node.func.id.startswith("mcp__"):
                    calls.append(node)
            elif kind is ast.Constant:
                if node.value.__class__ is str and node.value.startswith("mcp__"):
                    self.strings.add(node.value)
            elif kind in BINDING_KINDS:
                self.note_binding(node, kind)
        return calls

    def note_binding(self, node, kind):
        """What the rarer kinds of node bind (or, for an attribute, whether it reaches names dynamically)."""
        if kind is ast.Attribute:
            if node.attr in DYNAMIC_NAMES:
                self.dynamic = True
        elif kind is ast.arg:
            self.bind(node.arg)
        elif kind in (ast.Import, ast.ImportFrom):
            for alias in node.names:
                self.bind((alias.asname or alias.name).split(".")[0])
        elif kind in (ast.Global, ast.Nonlocal):
            for name in node.names:
                self.bind(name)
        elif kind.__name__ == "MatchMapping":
            if node.rest:
                self.bind(node.rest)
        elif node.name:  # definitions, exception handlers and pattern captures
            self.bind(node.name)

    def bind(self, name):
        self.bindings[name] = self.bindings.get(name, 0) + 1

    def add(self, node, text):
        self.findings.append((node.lineno, node.col_offset, f"line {node.lineno}: {text}"))

    def is_tool(self, name):
        return name in self.toolbox.tools and name not in self.bindings

    def loads_of_tools(self):
        for name, nodes in self.loads.items():
            if name.startswith("mcp__") and name not in self.toolbox.tools:
                yield from nodes

    def check_name(self, node):
        name = node.id
        if name in self.bindings or name in self.strings or self.dynamic or self.catches_name_error(node):
            return
        self.add(node, self.toolbox.why_unknown(name))

    def catches_name_error(self, node):
        """Whether `node` lies in a `try` body with a handler for NameError (or any exception)."""
        path = self.path_to(node)
        for parent, child in zip(path, path[1:]):
            if type(parent) is ast.Try or type(parent).__name__ == "TryStar":
                if child in parent.body and any(self.handles_name_error(h.type) for h in parent.handlers):
                    return True
        return False

    def path_to(self, target):
        """The nodes from the module down to `target` (found again: only names that are no tool need it)."""
        stack = [(self.tree, (self.tree,))]
        while stack:
            node, path = stack.pop()
            if node is target:
                return path
            for child in ast.iter_child_nodes(node):
                stack.append((child, path + (child,)))
        return ()

    @staticmethod
    def handles_name_error(handler_type):
        if handler_type is None:
            return True
        names = handler_type.elts if type(handler_type) is ast.Tuple else [handler_type]
        return any(type(n) is not ast.Name or n.id in ("NameError", "Exception", "BaseException") for n in names)

    def check_call(self, call):
        name = call.func.id
        if not self.is_tool(name):
            return
        tool = self.toolbox.tools[name]
        starred = any(type(a) is ast.Starred for a in call.args)
        if call.args and not starred:
            self.add(call, tool.positional(len(call.args)))
        given = set()  # with the names misspelt keywords most likely meant: those are not missing too
        double_starred = False
        for keyword in call.keywords:
            if keyword.arg is None:
                double_starred = True
                continue
            given.add(keyword.arg)
            if keyword.arg not in tool.by_name:
                if tool.extra is None:
                    self.add(keyword, tool.unknown(keyword.arg))
                    given.add(tool.closest(keyword.arg))
                continue
            value = literal(keyword.value)
            if value is not NOT_LITERAL:
                problem = tool.wrong_literal(keyword.arg, value)
                if problem:
                    self.add(keyword.value, problem)
        if not call.args and not double_starred:  # a positional argument may be the one that is missing
            missing = [n for n in tool.required if n not in given]
            if missing:
                self.add(call, tool.missing(missing))
        self.check_awaited(call, name)

    def check_awaited(self, call, name):
        """A tool call's coroutine that is certainly never awaited: a statement of its own, subscripted,
        iterated, or an attribute read from it; or assigned to a name bound once and only used that way."""
        parent = self.parents.get(call)
        if self.misused(call, parent):
            self.add(call, f"{name}(...) is never awaited, so the call never happens; write await {name}(...)")
            return
        target = assigned_name(call, parent)
        if target is None:
            return
        self.whole_program()
        if self.bindings.get(target) != 1:
            return
        uses = self.loads.get(target, [])
        if all(self.misused(use, self.parents.get(use)) for use in uses):
            self.add(call, f"{name}(...) is assigned to {target} but never awaited, so {target} is a coroutine, not "
                           f"the result; write {target} = await {name}(...)")

    @staticmethod
    def misused(node, parent):
        kind = type(parent)
        if kind is ast.Expr:
            return True
        if kind is ast.Subscript:
            return parent.value is node
        if kind is ast.Attribute:
            return parent.value is node and parent.attr not in COROUTINE_ATTRIBUTES
        if kind in (ast.For, ast.comprehension):
            return parent.iter is node
        return False


NOT_LITERAL = object()


LITERAL_CONTAINERS = (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp, ast.BinOp)


def literal(node):
    """The value of a literal expression (constants, containers of them, negative numbers), else NOT_LITERAL."""
    if node.__class__ is ast.Constant:  # most arguments: no need for literal_eval's walk
        return node.value
    if not isinstance(node, LITERAL_CONTAINERS):
        return NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except Exception:
        return NOT_LITERAL


def assigned_name(call, parent):
    """`x` for `x = call` and `x: T = call`, else None."""
    if type(parent) is ast.Assign and parent.value is call and len(parent.targets) == 1 \
            and type(parent.targets[0]) is ast.Name:
        return parent.targets[0].id
    if type(parent) is ast.AnnAssign and parent.value is call and type(parent.target) is ast.Name:
        return parent.target.id
    return None
