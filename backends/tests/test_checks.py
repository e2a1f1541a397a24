"""Tests for backends/src/checks.py: the checks of tool calls before a program runs and at each call.

Run with: python3 -m unittest discover -s backends/tests -v
"""
import gc
import sys
import textwrap
import unittest

from runner_source import SRC

sys.path.insert(0, str(SRC))
import checks  # noqa: E402

SIGNATURE = ('mcp__demo__query(*, ticker: str, statement: Literal["income", "balance"] = \'income\', '
             'limit: int = 4, from_: str = ...) -> Any')
QUERY = {
    "name": "mcp__demo__query",
    "params": [
        {"name": "ticker", "annotation": "str", "required": True, "types": ["string"]},
        {"name": "statement", "annotation": 'Literal["income", "balance"]', "required": False, "default": "income",
         "values": ["income", "balance"]},
        {"name": "limit", "annotation": "int", "required": False, "default": 4, "types": ["integer"]},
        {"name": "from_", "key": "from", "annotation": "str", "required": False, "types": ["string"]},
    ],
    "returns": "Any",
    "doc": "async def mcp__demo__query(...)",
}
OPEN = {"name": "mcp__demo__open", "params": [], "extra": {"name": "extra", "annotation": "Any"}, "returns": "Any",
        "doc": ""}
NONE = {"name": "mcp__demo__list", "params": [], "returns": "Any", "doc": ""}


def toolbox():
    return checks.Toolbox([QUERY, OPEN, NONE], {"mcp__demo__secret": "it is blocked by tools.block"},
                          {"mcp__down__": "server 'down' is unavailable: exited with status 1"})


def findings(code):
    return checks.precheck(textwrap.dedent(code), toolbox())[0]


class SignatureTest(unittest.TestCase):
    def test_the_signature_reads_like_the_schema(self):
        tool = toolbox().tools["mcp__demo__query"]
        self.assertEqual(tool.text(), SIGNATURE)
        self.assertEqual(str(toolbox().tools["mcp__demo__open"].signature), "(**extra: Any) -> Any")

    def test_binding_maps_names_to_keys_and_accepts_keys_themselves(self):
        tool = toolbox().tools["mcp__demo__query"]
        self.assertEqual(tool.bind((), {"ticker": "A", "from_": "2020"}), {"ticker": "A", "from": "2020"})
        self.assertEqual(tool.bind((), {"ticker": "A", "from": "2020"}), {"ticker": "A", "from": "2020"})
        self.assertEqual(toolbox().tools["mcp__demo__open"].bind((), {"anything": 1}), {"anything": 1})

    def test_binding_errors_name_the_tool_the_argument_the_closest_name_and_the_signature(self):
        tool = toolbox().tools["mcp__demo__query"]
        cases = [
            ((), {"tickr": "A"}, f"mcp__demo__query() got an unexpected keyword argument 'tickr'. "
                                 f"Did you mean 'ticker'? Signature: {SIGNATURE}"),
            ((), {"ticker": "A", "zzz": 1}, f"mcp__demo__query() got an unexpected keyword argument 'zzz'. "
                                            f"Signature: {SIGNATURE}"),
            ((), {}, f"mcp__demo__query() missing required keyword argument 'ticker'. Signature: {SIGNATURE}"),
            (("A",), {}, f"mcp__demo__query() takes keyword arguments only (got 1 positional argument). "
                         f"Signature: {SIGNATURE}"),
        ]
        for args, kwargs, message in cases:
            with self.assertRaises(TypeError) as raised:
                tool.bind(args, kwargs)
            self.assertEqual(str(raised.exception), message)

    def test_a_name_that_is_no_tool_says_why(self):
        box = toolbox()
        self.assertEqual(box.why_unknown("mcp__demo__qurey"), "'mcp__demo__qurey' is not a tool; did you mean "
                                                              "'mcp__demo__query'?")
        self.assertEqual(box.why_unknown("mcp__demo__secret"), "'mcp__demo__secret' is not callable: it is blocked "
                                                               "by tools.block")
        self.assertEqual(box.why_unknown("mcp__down__x"), "'mcp__down__x' is not callable now: its server 'down' is "
                                                          "unavailable: exited with status 1")
        self.assertEqual(box.why_unknown("mcp__zzz__zzz"), "'mcp__zzz__zzz' is not a tool; list_callable_tools() "
                                                           "lists them")


class PrecheckTest(unittest.TestCase):
    maxDiff = None

    def test_every_certain_mistake_is_reported_with_its_line(self):
        code = """
            print("this never runs")
            a = await mcp__demo__qurey(ticker="A")
            b = await mcp__demo__query(tickr="A")
            c = await mcp__demo__query(ticker=5, statement="incme", limit="many")
            d = await mcp__demo__query("A")
            f = await mcp__demo__query(limit=1)
            mcp__demo__query(ticker="A")
            e = mcp__demo__query(ticker="A")
            print(e["revenue"])
            await mcp__demo__secret()
            await mcp__down__thing()
            await mcp__demo__list(x=1)
            for row in mcp__demo__query(ticker="A"):
                pass
        """
        self.assertEqual(findings(code), [
            "line 3: 'mcp__demo__qurey' is not a tool; did you mean 'mcp__demo__query'?",
            f"line 4: mcp__demo__query() got an unexpected keyword argument 'tickr'. Did you mean 'ticker'? "
            f"Signature: {SIGNATURE}",
            "line 5: mcp__demo__query(ticker=5): an integer, but the tool expects a string",
            "line 5: mcp__demo__query(statement='incme'): not one of 'income', 'balance'; did you mean 'income'?",
            "line 5: mcp__demo__query(limit='many'): a string, but the tool expects an integer",
            f"line 6: mcp__demo__query() takes keyword arguments only (got 1 positional argument). "
            f"Signature: {SIGNATURE}",
            f"line 7: mcp__demo__query() missing required keyword argument 'ticker'. Signature: {SIGNATURE}",
            "line 8: mcp__demo__query(...) is never awaited, so the call never happens; write await "
            "mcp__demo__query(...)",
            "line 9: mcp__demo__query(...) is assigned to e but never awaited, so e is a coroutine, not the result; "
            "write e = await mcp__demo__query(...)",
            "line 11: 'mcp__demo__secret' is not callable: it is blocked by tools.block",
            "line 12: 'mcp__down__thing' is not callable now: its server 'down' is unavailable: exited with status 1",
            "line 13: mcp__demo__list() got an unexpected keyword argument 'x'. Signature: mcp__demo__list() -> Any",
            "line 14: mcp__demo__query(...) is never awaited, so the call never happens; write await "
            "mcp__demo__query(...)",
        ])

    def test_valid_programs_are_never_rejected(self):
        programs = {
            "gather": "import asyncio\nr = await asyncio.gather(mcp__demo__query(ticker='A'), "
                      "*[mcp__demo__query(ticker=t) for t in 'BC'])",
            "tasks": "import asyncio\nt = asyncio.create_task(mcp__demo__query(ticker='A'))\nprint(await t)",
            "list then gather": "import asyncio\ncalls = []\nfor t in 'AB':\n    calls.append(mcp__demo__query("
                                "ticker=t))\nprint(await asyncio.gather(*calls))",
            "assigned then awaited": "c = mcp__demo__query(ticker='A')\nprint('later')\nr = await c\nprint(r['x'])",
            "assigned then gathered": "import asyncio\nc = mcp__demo__query(ticker='A')\n"
                                      "print(await asyncio.gather(c))",
            "passed on": "import asyncio\nc = mcp__demo__query(ticker='A')\nawait asyncio.wait_for(c, 5)",
            "returned": "def make():\n    return mcp__demo__query(ticker='A')\nprint(await make())",
            "lambda": "f = lambda t: mcp__demo__query(ticker=t)\nprint(await f('A'))",
            "dict of calls": "import asyncio\nd = {t: mcp__demo__query(ticker=t) for t in 'AB'}\n"
                             "print(dict(zip(d, await asyncio.gather(*d.values()))))",
            "dynamic keywords": "args = {'tickr': 'A'}\nprint(await mcp__demo__query(**args))",
            "star args": "print(await mcp__demo__query(*[], ticker='A'))",
            "name-mapped keyword by key": "print(await mcp__demo__query(ticker='A', **{'from': '2020'}))",
            "open tool": "print(await mcp__demo__open(whatever=1, more=[2]))",
            "variables as values": "n = 'many'\nprint(await mcp__demo__query(ticker='A', limit=n))",
            "float as integer": "print(await mcp__demo__query(ticker='A', limit=2.0))",
            "own function named like a tool": "async def mcp__mine__thing(x):\n    return x\n"
                                              "print(await mcp__mine__thing(1))",
            "own tool shadowing": "async def mcp__demo__query(*a):\n    return a\nprint(await mcp__demo__query(1))",
            "probe with NameError": "try:\n    f = mcp__demo__maybe\nexcept NameError:\n    f = None",
            "probe in globals": "if 'mcp__demo__maybe' in globals():\n    print(await mcp__demo__maybe())",
            "globals()": "g = globals()\nprint(await g['mcp__demo__query'](ticker='A'))",
            "close on purpose": "c = mcp__demo__query(ticker='A')\nc.close()",
            "send": "c = mcp__demo__query(ticker='A')\ntry:\n    c.send(None)\nexcept StopIteration:\n    pass",
            "ensure_future": "import asyncio\nf = asyncio.ensure_future(mcp__demo__query(ticker='A'))\nprint(await f)",
            "asyncio.run": "import asyncio\nprint(asyncio.run(mcp__demo__query(ticker='A')))",
            "imported as": "import json as mcp__mine__json\nprint(mcp__mine__json.dumps(1))",
            "caught as": "try:\n    1 / 0\nexcept ZeroDivisionError as mcp__mine__e:\n    print(mcp__mine__e)",
            "own class": "class mcp__mine__C:\n    pass\nprint(mcp__mine__C())",
            "parameter": "def f(mcp__mine__a):\n    return mcp__mine__a\nprint(f(1))",
            "global": "def f():\n    global mcp__mine__g\n    mcp__mine__g = 1\nf()\nprint(mcp__mine__g)",
            "syntax error": "x = (",
            "no tools": "print(1)",
        }
        if sys.version_info >= (3, 11):
            programs["task group"] = ("import asyncio\nasync with asyncio.TaskGroup() as g:\n"
                                      "    t = g.create_task(mcp__demo__query(ticker='A'))\nprint(t.result())")
        if sys.version_info >= (3, 10):
            programs["match capture"] = ("match 1:\n    case mcp__demo__zz:\n        print(mcp__demo__zz)")
            programs["match star"] = "match [1, 2]:\n    case [*mcp__mine__rest]:\n        print(mcp__mine__rest)"
            programs["match rest"] = "match {'a': 1}:\n    case {**mcp__mine__rest}:\n        print(mcp__mine__rest)"
        for name, code in programs.items():
            with self.subTest(name):
                self.assertEqual(checks.precheck(code, toolbox())[0], [])

    def test_a_lone_carriage_return_ends_a_line_as_in_python(self):
        # Line numbers as the syntax tree counts them: a definition after a lone CR is seen, and so is a mistake.
        defined = "a = 1\rasync def mcp__mine__x():\n    return 1\nb = 2\nprint(await mcp__mine__x())\n" \
                  "print(await mcp__mine__x())\n"
        self.assertEqual(checks.precheck(defined, toolbox())[0], [])
        mistaken = "a = 1\r\nb = 2\rprint(await mcp__demo__qurey(ticker='A'))\n"
        self.assertEqual(checks.precheck(mistaken, toolbox())[0],
                         ["line 3: 'mcp__demo__qurey' is not a tool; did you mean 'mcp__demo__query'?"])

    def test_names_are_judged_as_python_reads_them_nfkc_normalised(self):
        # A fullwidth letter is its ASCII one to Python, in a tool's name and a keyword's; its statement is looked at
        # whether or not its text spells `mcp__`.
        mistaken = "print(await mcp__demo__list())\nawait \uff4dcp__demo__query(tickr='A')\n" \
                   "e = mcp\uff3f_demo__qurey()\n"
        self.assertEqual(findings(mistaken), [
            f"line 2: mcp__demo__query() got an unexpected keyword argument 'tickr'. Did you mean 'ticker'? "
            f"Signature: {SIGNATURE}",
            "line 3: 'mcp__demo__qurey' is not a tool; did you mean 'mcp__demo__query'?",
        ])
        self.assertEqual(findings("await \uff4dcp__demo__query(\uff54icker='A')"), [])
        # A name bound in a statement that does not spell `mcp__`, and a program reaching names dynamically.
        self.assertEqual(findings("\uff4dcp__demo__query = print\nmcp__demo__query(1)"), [])
        self.assertEqual(findings("g = \uff47lobals()\nprint(await g['mcp__demo__maybe']())\nawait mcp__demo__maybe()"),
                         [])

    def test_words_that_only_contain_a_dynamic_name_do_not_widen_the_check(self):
        self.assertFalse(checks.may_reach_names_dynamically("evaluated = execution = 1"))
        self.assertTrue(checks.may_reach_names_dynamically("g = globals()"))

    def test_the_collector_is_paused_during_the_check_only(self):
        seen = []
        real_parse = checks.ast.parse
        checks.ast.parse = lambda *args: seen.append(gc.isenabled()) or real_parse(*args)
        try:
            for enabled in (True, False):
                (gc.enable if enabled else gc.disable)()
                checks.precheck("print(1)", toolbox())
                self.assertEqual(gc.isenabled(), enabled)
        finally:
            checks.ast.parse = real_parse
            gc.enable()
        self.assertEqual(seen, [False, False])

    def test_json_equality_tells_booleans_from_numbers(self):
        self.assertTrue(checks.json_equal(1, 1.0))
        self.assertFalse(checks.json_equal(True, 1))
        self.assertTrue(checks.json_equal({"a": [1, (2,)]}, {"a": [1, [2]]}))

    def test_a_deep_or_huge_program_is_left_to_run_time(self):
        self.assertEqual(checks.precheck("x = " + "(" * 5000 + ")" * 5000, toolbox()), ([], None))

    def test_the_signature_objects_render_like_python(self):
        self.assertEqual(repr(checks.OMITTED), "...")
        self.assertEqual(repr(checks.Annotation('Literal["a"]')), 'Literal["a"]')


if __name__ == "__main__":
    unittest.main()
