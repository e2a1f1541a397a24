"""ptc-mcp runner, part 2: what an uncaught error adds for the model, after the exception's line.

Embedded between checks.py and runner.py (one source for `python -c`); stdlib only, Python 3.9+, importable
alone (`import explain`) for its tests. Nothing here runs while the program runs but `Results.add` and
`Results.forget_dropped`, O(1) per call.

* `Results` remembers the values tool calls gave the program and where each came from (tool and line). It
  holds them strongly, so an id can never be reused by the program's own objects: no false attribution. A
  value is forgotten at the next call once only `Results` holds it (its refcount says so); the parts of it the
  program still holds (`rows = (await t())["rows"]`) are kept in its place, with their path.
* `explain(exc, ...)` finds the expression that failed in the program's innermost frame (its exact position
  on 3.11+, else its line), reads the operands it can without running code (names, constant subscripts,
  `dict.get`, the result of an `await mcp__...()` on that line), and for those that came from a tool result
  (or are a key of one: `r["n"]`, `r.get("x")`) on a KeyError, IndexError, TypeError, AttributeError or a
  ValueError of unpacking, shows where from and the value's shape: a dict's keys with the types of their
  values, a list's length and its first item's shape, a string's first characters (and what it parses to, if
  it is JSON text); never more than a bounded preview. A loop variable says what the loop gives (keys, items,
  characters). Then "did you mean": the closest key, the key nested, `.items()`, `json.loads`.
* It also hints at the sandbox's limits: a host file outside the working directory is not visible, and only
  the standard library can be imported.
"""
import ast
import difflib
import itertools
import json
import os
import re
import sys

MAX_HELD = 256  # results (or parts of them) remembered at once; the oldest are forgotten first
CHECKED = 4  # at each call: the newest values checked for being dropped, and as many more in turn
MAX_PARTS = 64  # a dropped value with more items than this leaves nothing of it remembered
MAX_SEARCH = 200_000  # nodes visited looking for values inside the remembered results, per error
MAX_KEYS = 10  # a dict's keys shown
MAX_KEY_CHARS = 40
MAX_SHAPE_CHARS = 700
MAX_PREVIEW_CHARS = 60  # a string's first characters shown
MAX_EXPRESSION_CHARS = 40
MAX_JSON_CHARS = 4 << 20  # a string longer than this is not parsed to say what it holds
MAX_NOTES = 2  # values described per error
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
COMPREHENSION_FRAMES = {"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"}
KEY_TYPES = (str, int, float, bool, type(None))
JSON_KINDS = (dict, list, *KEY_TYPES)  # what a tool result is made of: operations on them run no program code
NOT_READ = object()  # an operand that cannot be read without running program code


def held_counts(container):
    """(key, item, refcount of item) for each item of a dict or list, counted the same way every time."""
    pairs = container.items() if type(container) is dict else enumerate(container)
    return [(key, item, sys.getrefcount(item)) for key, item in pairs]


# What the refcounts read when nothing but the results' list (or the parent) holds a value.
HELD_BY_ENTRY = (lambda entry: sys.getrefcount(entry[0]))(([], None, None, ()))
HELD_BY_PARENT = held_counts([[]])[0][2]


def traceable(value):
    """Values whose identity says where they came from: a 0- or 1-character string may be a shared object."""
    kind = type(value)
    return kind is dict or kind is list or (kind is str and len(value) > 1)


class Results:
    """The values tool calls gave the program: (value, tool, line, path inside the call's result)."""

    def __init__(self):
        self._held = []
        self._turn = 0  # where the values checked in turn start next time

    def add(self, value, tool, line):
        if traceable(value):
            self._held.append((value, tool, line, ()))
            if len(self._held) > MAX_HELD:
                del self._held[0]

    def forget_dropped(self):
        """Forget the values only we hold, keeping the parts of them the program still holds. Called as each
        call starts, so a loop's previous result is gone before the next one arrives. O(1): only the newest
        few are checked, and a few older ones in turn, so that each is checked within len/CHECKED calls."""
        held = self._held
        older = max(len(held) - CHECKED, 0)
        start = self._turn % older if older else 0
        self._turn = start + CHECKED
        # From the end, so that replacing one value by its parts leaves the indices still to check. With no
        # older ones (a loop of calls holds one) the newest are all: no chain of ranges to build each call.
        newest = range(len(held) - 1, older - 1, -1)
        checked = itertools.chain(newest, range(min(start + CHECKED, older) - 1, start - 1, -1)) if older else newest
        for i in checked:
            if sys.getrefcount(held[i][0]) <= HELD_BY_ENTRY:
                held[i:i + 1] = held_parts(held[i])
        if len(held) > MAX_HELD:
            del held[:-MAX_HELD]

    def latest(self, tool, line):
        """The last whole result of `tool` still remembered: the one called on `line` if there is one."""
        whole = [(at, value) for value, name, at, path in self._held if name == tool and not path]
        return next((value for at, value in reversed(whole) if at == line), whole[-1][1] if whole else NOT_READ)

    def origin(self, obj, budget):
        """(tool, line, path) of a remembered value, or None; `budget` ([nodes]) bounds the search inside them."""
        if not traceable(obj):
            return None
        held = self._held[::-1]
        for value, tool, line, path in held:
            if value is obj:
                return tool, line, path
        # Breadth first, every result at once: the values near a result's top are found before the budget is
        # spent in a long list.
        level = [(value, (tool, line, path)) for value, tool, line, path in held]
        while level and budget[0] > 0:
            deeper = []
            for container, (tool, line, path) in level:
                pairs = container.items() if type(container) is dict else enumerate(container) \
                    if type(container) is list else ()
                for key, item in pairs:
                    if item is obj:
                        return tool, line, path + (key,)
                    if type(item) is dict or type(item) is list:
                        deeper.append((item, (tool, line, path + (key,))))
                budget[0] -= len(container) if type(container) in (dict, list) else 0
                if budget[0] <= 0:
                    return None
            level = deeper
        return None


def held_parts(entry):
    """The parts of a dropped value (itself held only by `entry`) that something else still holds."""
    kept, pending, visited = [], [entry], 0
    while pending and visited < 4 * MAX_PARTS:
        value, tool, line, path = pending.pop()
        if type(value) not in (dict, list) or len(value) > MAX_PARTS:
            continue
        for key, item, count in held_counts(value):
            visited += 1
            if not traceable(item):
                continue
            part = (item, tool, line, path + (key,))
            (kept if count > HELD_BY_PARENT else pending).append(part)
    return kept


# --- shapes ------------------------------------------------------------------------------------------------

def key_text(key):
    text = repr(key) if type(key) in KEY_TYPES else f"<{type(key).__name__}>"
    return text if len(text) <= MAX_KEY_CHARS else text[:MAX_KEY_CHARS - 4] + "...'"


def shape(value, depth):
    """The value's type structure as Python-like text: {'a': str, 'b': [int, ...] (3 items)}."""
    kind = type(value)
    if kind is dict:
        if not value:
            return "{}"
        if depth <= 0:
            return f"dict ({len(value)} keys)"
        shown = ", ".join(f"{key_text(k)}: {shape(v, depth - 1)}" for k, v in itertools.islice(value.items(), MAX_KEYS))
        more = f", ... {len(value) - MAX_KEYS} more keys" if len(value) > MAX_KEYS else ""
        return "{" + shown + more + "}"
    if kind is list:
        if not value:
            return "[] (empty)"
        items = "1 item" if len(value) == 1 else f"{len(value)} items"
        if depth <= 0:
            return f"list ({items})"
        rest = "" if len(value) == 1 else ", ..."
        return f"[{shape(value[0], depth - 1)}{rest}] ({items})"
    return "None" if value is None else kind.__name__


def bounded_shape(value):
    for depth in (3, 2, 1):
        text = shape(value, depth)
        if len(text) <= MAX_SHAPE_CHARS:
            return text
    return text[:MAX_SHAPE_CHARS] + "..."


def preview(text):
    """A string's first characters."""
    return repr(text[:MAX_PREVIEW_CHARS]) + ("..." if len(text) > MAX_PREVIEW_CHARS else "")


def parsed_json(text):
    """What a string that is JSON text parses to (a dict or list), else NOT_READ."""
    start = text[:64].lstrip()[:1]
    if start not in ("{", "[") or len(text) > MAX_JSON_CHARS:
        return NOT_READ
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return NOT_READ
    return value if type(value) in (dict, list) else NOT_READ


def describe_value(value):
    """'a dict {...}', 'a list of 3 items, the first {...}', 'a str of 40 chars: ...'."""
    kind = type(value)
    if kind is dict:
        return f"a dict {bounded_shape(value)}" if value else "an empty dict"
    if kind is list:
        if not value:
            return "an empty list"
        return f"a list of {len(value)} item{'s' if len(value) > 1 else ''}, the first {bounded_shape(value[0])}"
    if kind is str:
        text = f"a str of {len(value)} char{'s' if len(value) != 1 else ''}: {preview(value)}"
        parsed = parsed_json(value)
        if parsed is not NOT_READ:
            text += f" (JSON text: json.loads() gives {describe_value(parsed)})"
        return text
    if value is None:
        return "None"
    return f"{'an' if kind.__name__[0] in 'aeiou' else 'a'} {kind.__name__}"


def path_text(path):
    return "".join(f"[{key_text(key)}]" for key in path)


# --- what failed -------------------------------------------------------------------------------------------

class Failure:
    """The program's innermost frame of an exception's traceback, and the program's syntax tree."""

    def __init__(self, exc, code, filename):
        self.frame = self.lasti = self.line = None
        self.caller = None  # the program's frame that called it
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                self.caller = self.frame
                self.frame, self.lasti, self.line = tb.tb_frame, tb.tb_lasti, tb.tb_lineno
            tb = tb.tb_next
        self.code = code
        self.tree = None
        self.parents = {}
        if self.frame is not None:
            try:
                self.tree = ast.parse(code)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return
            for node in ast.walk(self.tree):
                for child in ast.iter_child_nodes(node):
                    self.parents[child] = node

    def nodes(self):
        """The expression nodes that may have failed: the exact one (3.11+), else all on the failing line."""
        positions = getattr(self.frame.f_code, "co_positions", None)
        if positions is not None and self.lasti is not None and self.lasti >= 0:
            where = next(itertools.islice(positions(), self.lasti // 2, None), None)
            if where is not None and None not in where:
                line, end_line, column, end_column = where
                exact = [node for node in ast.walk(self.tree) if isinstance(node, ast.expr)
                         and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)
                         == (line, end_line, column, end_column)]
                if exact:
                    return exact[:1]
        return [node for node in ast.walk(self.tree) if isinstance(node, ast.expr)
                and node.lineno <= self.line <= node.end_lineno]

    def text(self, node):
        """The node's source text, if short (an `await` is named by its call instead)."""
        if isinstance(node, ast.Await):
            return None
        try:
            text = ast.get_source_segment(self.code, node)
        except Exception:
            text = None
        if not text or "\n" in text or len(text) > MAX_EXPRESSION_CHARS:
            return None
        return text


def operands(node):
    """(operand, node): the sub-expressions whose values the operation `node` used; then (node, None): the
    node's own value, for what failed using it (iterating or unpacking it, `for x in r.get("items")`)."""
    if isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        found = [node.value]
    elif isinstance(node, ast.Call):
        found = [arg for arg in node.args] + [keyword.value for keyword in node.keywords]
        if isinstance(node.func, ast.Attribute):
            found.insert(0, node.func.value)
    elif isinstance(node, ast.BinOp):
        found = [node.left, node.right]
    elif isinstance(node, ast.Compare):
        found = [node.left, *node.comparators]
    elif isinstance(node, ast.UnaryOp):
        found = [node.operand]
    else:
        found = []
    return [(operand, node) for operand in found] + [(node, None)]


def fails_alike(exc, node, value, reader):
    """Whether the operation `node` fails on `value` the way it failed: the same subscript raises the same
    exception, the attribute is missing; for other operations (None: one on the value itself), the message
    names the value's type."""
    if type(value) not in JSON_KINDS:
        return False
    if isinstance(node, ast.Subscript):
        if not isinstance(exc, (KeyError, IndexError, TypeError)):
            return False
        key = reader.read(node.slice)
        if key is NOT_READ:
            return fits(exc, value)
        try:
            value[key]
        except Exception as e:
            return type(e) is type(exc) and e.args == exc.args
        return False
    if isinstance(node, ast.Attribute):
        name = attribute_name(exc)
        return isinstance(exc, AttributeError) and name in (None, node.attr) and not hasattr(type(value), node.attr)
    return isinstance(exc, TypeError) and fits(exc, value)


class Reader:
    """Reads operands in the failing frame without running program code: names, subscripts with a constant or
    a name of builtin dicts, lists and strings, `dict.get`, and the awaited result of a tool call."""

    def __init__(self, failure, results):
        self.failure = failure
        self.results = results
        self.budget = [MAX_SEARCH]  # shared by every search for one error

    def origin(self, value):
        return self.results.origin(value, self.budget)

    def read(self, node):
        try:
            return self._read(node)
        except Exception:
            return NOT_READ

    def _read(self, node):
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Constant) and type(node.value) in KEY_TYPES:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            value = node.operand.value
            return -value if type(value) in (int, float) else NOT_READ
        if isinstance(node, ast.Subscript):
            base, key = self._read(node.value), self._read(node.slice)
            if type(base) not in (dict, list, str, tuple) or type(key) not in KEY_TYPES:
                return NOT_READ
            try:
                return base[key]
            except (LookupError, TypeError):
                return NOT_READ
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and not node.keywords and 1 <= len(node.args) <= 2:
            base = self._read(node.func.value)
            args = [self._read(arg) for arg in node.args]
            if type(base) is dict and all(type(arg) in KEY_TYPES for arg in args):
                return base.get(*args)
            return NOT_READ
        if isinstance(node, ast.Await) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            return self.results.latest(node.value.func.id, node.value.lineno)
        return NOT_READ

    def name(self, name):
        frames = [self.failure.frame]
        if self.failure.frame.f_code.co_name in COMPREHENSION_FRAMES and self.failure.caller is not None:
            frames.append(self.failure.caller)  # 3.9-3.11: a comprehension's frame; the names it loops over
        for frame in frames:
            for scope in (frame.f_locals, frame.f_globals):
                if name in scope:
                    return scope[name]
        return NOT_READ


# --- what to say -------------------------------------------------------------------------------------------

def mentioned(message, value):
    """Whether an error message names the value's type (or, for a list, its first item's)."""
    names = {type(value).__name__}
    if type(value) is str:
        names.add("string")
    if type(value) is list and value:
        names.add(type(value[0]).__name__)
    return any(re.search(r"\b" + name + r"\b", message) for name in names)


def attribute_name(exc):
    """The attribute an AttributeError is about (Python 3.9 does not keep it: read from its message)."""
    name = getattr(exc, "name", None)
    if type(name) is str:
        return name
    message = str(exc.args[0]) if exc.args and type(exc.args[0]) is str else ""
    match = re.search(r"has no attribute '(\w+)'", message)
    return match and match.group(1)


def fits(exc, value):
    """Whether `value` can be what the error is about, as far as its message tells."""
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else None
        return type(value) is dict and type(key) in KEY_TYPES and key not in value
    if isinstance(exc, IndexError):
        return type(value) in (list, str)
    message = str(exc.args[0]) if exc.args and type(exc.args[0]) is str else ""
    if isinstance(exc, AttributeError):
        name = attribute_name(exc)
        return mentioned(message, value) and not (name and hasattr(type(value), name))
    return mentioned(message, value)


def nearest_keys(key, keys):
    keys = [k for k in keys if type(k) is str]
    folded = [k for k in keys if k.lower() == key.lower() and k != key]
    return folded + [k for k in difflib.get_close_matches(key, keys, n=3, cutoff=0.6) if k not in folded]


def nested_paths(value, key, depth=2):
    """Paths to `key` inside the dicts of value (and the first item of its lists), up to `depth` levels."""
    if depth <= 0:
        return []
    found = []
    pairs = value.items() if type(value) is dict else [(0, value[0])] if type(value) is list and value else []
    for k, item in itertools.islice(pairs, 4 * MAX_KEYS):
        if type(item) is dict and key in item:
            found.append((k, key))
        found += [(k,) + path for path in nested_paths(item, key, depth - 1)]
    return found[:3]


def suggestion(exc, value, text):
    """'did you mean ...?' for a value that came from a tool result, or None."""
    expr = text or "it"
    message = str(exc.args[0]) if exc.args and type(exc.args[0]) is str else ""
    if isinstance(exc, TypeError) and type(value) in (dict, list) and "JSON object must be" in message:
        return "tool results are parsed JSON already: use the value as it is"
    ideas = []
    if type(value) is dict and isinstance(exc, KeyError) and type(exc.args[0]) is str:
        key = exc.args[0]
        ideas = [f"{expr}[{key_text(k)}]" for k in nearest_keys(key, value)]
        ideas += [expr + path_text(path) for path in nested_paths(value, key)]
        if not ideas:  # e.g. {'content': 'size: 12\n...'}: the key is in text the tool returned
            texts = [k for k, item in itertools.islice(value.items(), 4 * MAX_KEYS)
                     if type(item) is str and key in item[:MAX_JSON_CHARS]]
            ideas = [f"{expr}[{key_text(k)}] (text that mentions {key_text(key)}: {preview(value[k])})"
                     for k in texts[:2]]
    elif type(value) is dict and isinstance(exc, AttributeError) and attribute_name(exc):
        name = attribute_name(exc)
        if name in value:
            ideas = [f"{expr}[{key_text(name)}]"]
        else:
            ideas = [f"{expr}[{key_text(k)}].{name}" for k, item in value.items()
                     if type(item) in (str, list, dict) and hasattr(type(item), name)][:2]
    elif type(value) is list and value and type(value[0]) is dict and not isinstance(exc, IndexError):
        ideas = [f"{expr}[0]", f"a loop over {expr}"]
    elif type(value) is str and parsed_json(value) is not NOT_READ:
        ideas = [f"json.loads({expr})"]
    return f"did you mean {' or '.join(ideas)}?" if ideas else None


def origin_text(origin, text=None):
    """'came from mcp__s__t (line 2)', and where in its result unless the expression `text` says it."""
    tool, line, path = origin
    at = "" if line is None else f" (line {line})"
    where = path_text(path)
    said = text is not None and text.replace('"', "'").endswith(where)
    return f"came from {tool}{at}" + (f", at {where} of its result" if path and not said else "")


def value_note(exc, value, origin, text):
    lines = [f"{text or 'the value'} {origin_text(origin, text)}: {describe_value(value)}"]
    idea = suggestion(exc, value, text)
    return lines + ([idea] if idea else [])


def loop_note(failure, reader, exc, name):
    """For a name bound by a loop over a tool result: what the loop gives (items, keys or characters).
    (value, lines), or None."""
    node = name
    while node in failure.parents:
        node = failure.parents[node]
        if isinstance(node, COMPREHENSIONS):
            loops = node.generators
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            loops = [node]
        else:
            continue
        for loop in loops:
            if not (isinstance(loop.target, ast.Name) and loop.target.id == name.id):
                continue
            source = reader.read(loop.iter)
            origin = None if source is NOT_READ else reader.origin(source)
            if origin is None:
                return None
            what = {dict: "a key", str: "one character"}.get(type(source), "an item")
            iterable = failure.text(loop.iter) or "what it loops over"
            why = " (a loop over a dict gives its keys)" if type(source) is dict else ""
            came = origin_text(origin, iterable)
            lines = [f"{name.id} is {what} of {iterable}{why}, which {came}: {describe_value(source)}"]
            idea = None
            if type(source) is list and source and fits(exc, source[0]):
                idea = suggestion(exc, source[0], name.id)
            elif type(source) is dict:
                lists = [f"{iterable}[{key_text(k)}]" for k, item in source.items()
                         if type(item) is list and k != "_notes"][:2]  # (ptc-mcp's own: the result's prose)
                idea = f"did you mean a loop over {' or '.join(lists)}?" if lists else None
            elif type(source) is str and parsed_json(source) is not NOT_READ:
                idea = f"did you mean a loop over json.loads({iterable})?"
            lines += [idea] if idea else []
            return source, lines
    return None


def part_of_result(reader, operand):
    """(container, its expression, key, its origin) for an operand `x[key]` or `x.get(key)` where x came from a
    tool result (its value, e.g. a number or None, says nothing itself), else None."""
    if isinstance(operand, ast.Subscript):
        base_node, key_node = operand.value, operand.slice
    elif isinstance(operand, ast.Call) and isinstance(operand.func, ast.Attribute) and operand.func.attr == "get" \
            and operand.args and not operand.keywords:
        base_node, key_node = operand.func.value, operand.args[0]
    else:
        return None
    base, key = reader.read(base_node), reader.read(key_node)
    if type(base) not in (dict, list) or type(key) not in KEY_TYPES:
        return None
    origin = reader.origin(base)
    return None if origin is None else (base, base_node, key, origin)


def operand_note(failure, reader, exc, operand, node):
    """(value, lines) about an operand of the failing operation `node` whose value came from a tool result and
    that the operation fails on, or None."""
    value = reader.read(operand)
    if value is not NOT_READ and not fails_alike(exc, node, value, reader):
        return None
    origin = None if value is NOT_READ else reader.origin(value)
    part = None if origin is not None or value is NOT_READ else part_of_result(reader, operand)
    if part is not None:
        base, base_node, key, (tool, line, path) = part
        if isinstance(operand, ast.Call) and key not in base:  # .get() of a key the result lacks
            base_text = failure.text(base_node)
            lines = [f"{failure.text(operand) or 'the value'} is {describe_value(value)}: {key_text(key)} is not a "
                     f"key of {base_text or 'it'}, which {origin_text(part[3], base_text)}: {describe_value(base)}"]
            idea = suggestion(KeyError(key), base, base_text)
            return base, lines + ([idea] if idea else [])
        origin = tool, line, path + (key,)
    if origin is not None:
        return value, value_note(exc, value, origin, failure.text(operand))
    if isinstance(operand, ast.Name):  # (3.12+ keeps no comprehension variable after an error)
        return loop_note(failure, reader, exc, operand)
    return None


def unpack_note(failure, reader, target):
    """For `a, b = x` or `for a, b in x` where x came from a tool result: (x, lines), or None."""
    parent = failure.parents.get(target)
    if isinstance(parent, ast.Assign):
        source_node, each = parent.value, False
    elif isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.target is target:
        source_node, each = parent.iter, True
    else:
        return None
    source = reader.read(source_node)
    origin = None if source is NOT_READ else reader.origin(source)
    if origin is None:
        return None
    text = failure.text(source_node)
    if not each:
        return source, value_note(ValueError(), source, origin, text)
    what = {dict: "key", str: "character"}.get(type(source), "item")
    lines = [f"{failure.text(target) or 'the loop'} unpacks each {what} of {text or 'what it loops over'}, which "
             f"{origin_text(origin, text)}: {describe_value(source)}"]
    if type(source) is dict:
        lines.append(f"did you mean {text or 'it'}.items()?")
    return source, lines


UNPACKING = ("too many values to unpack", "not enough values to unpack")


def data_notes(exc, code, filename, results):
    message = exc.args[0] if exc.args and type(exc.args[0]) is str else ""
    unpacking = isinstance(exc, ValueError) and message.startswith(UNPACKING)
    if not unpacking and not isinstance(exc, (KeyError, IndexError, TypeError, AttributeError)):
        return []
    failure = Failure(exc, code, filename)
    if failure.tree is None:
        return []
    reader = Reader(failure, results)
    if unpacking:
        targets = [node for node in failure.nodes() if isinstance(node, (ast.Tuple, ast.List))
                   and isinstance(node.ctx, ast.Store)]
        found = next(filter(None, (unpack_note(failure, reader, target) for target in targets)), None)
        return [] if found is None else found[1]
    candidates = [pair for node in failure.nodes() for pair in operands(node)]
    obj = getattr(exc, "obj", NOT_READ) if isinstance(exc, AttributeError) else NOT_READ  # 3.10+
    origin = None if obj is NOT_READ else reader.origin(obj)
    if origin is not None:  # the object is known: only its expression's text is looked for
        text = next((failure.text(operand) for operand, _ in candidates if reader.read(operand) is obj), None)
        return value_note(exc, obj, origin, text)
    notes, described = [], []
    for operand, node in candidates:
        found = operand_note(failure, reader, exc, operand, node)
        if found is None or any(found[0] is value for value in described):
            continue
        described.append(found[0])
        notes += found[1]
        if len(described) == MAX_NOTES:
            break
    return notes


# --- the sandbox's limits ----------------------------------------------------------------------------------

HOST_FILE_HINT = "(not visible here: programs see only their working directory; read host files through a tool)"
MODULE_HINT = "(only the standard library is available here)"
SITE_MODULE_HINT = "(only the standard library and the packages installed for the server's interpreter are available here)"


def outside(path, workdir):
    try:
        path = os.fsdecode(os.fspath(path))
    except TypeError:
        return False
    full = os.path.abspath(os.path.join(workdir, path))
    return os.path.commonpath([full, workdir]) != workdir


def limit_notes(exc, workdir):
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        paths = [p for p in (exc.filename, exc.filename2) if p is not None]
        return [HOST_FILE_HINT] if any(outside(p, workdir) for p in paths) else []
    if isinstance(exc, ModuleNotFoundError) and type(exc.name) is str:
        top = exc.name.partition(".")[0]
        if top not in getattr(sys, "stdlib_module_names", ()):
            return [MODULE_HINT]
    return []


def explain(exc, code, filename, results, workdir):
    """Lines to show after the exception's own (none when there is nothing to add); never raises."""
    try:
        return limit_notes(exc, workdir) + data_notes(exc, code, filename, results)
    except Exception:
        return []
