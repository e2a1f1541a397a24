"""Tests for backends/src/explain.py: where a value came from, its shape, and hints at the sandbox's limits.
(test_runner.py checks what an error shows end to end.)

Run with: python3 -m unittest discover -s backends/tests -v
"""
import ast
import sys
import unittest

from runner_source import SRC

sys.path.insert(0, str(SRC))
import explain  # noqa: E402


def origin(results, value):
    return results.origin(value, [explain.MAX_SEARCH])


def held(results):
    return [(type(value).__name__, tool, line, path) for value, tool, line, path in results._held]


class ShapeTest(unittest.TestCase):
    def test_a_shape_names_types_and_keys_never_values(self):
        value = {"id": 7, "name": "secret", "tags": ["a", "b"], "owner": {"login": "x", "admin": False},
                 "score": 1.5, "empty": [], "none": None}
        self.assertEqual(explain.bounded_shape(value),
                         "{'id': int, 'name': str, 'tags': [str, ...] (2 items), 'owner': {'login': str, 'admin': "
                         "bool}, 'score': float, 'empty': [] (empty), 'none': None}")

    def test_a_shape_is_bounded_in_keys_depth_and_length(self):
        self.assertEqual(explain.bounded_shape({f"k{i}": i for i in range(12)}),
                         "{'k0': int, 'k1': int, 'k2': int, 'k3': int, 'k4': int, 'k5': int, 'k6': int, 'k7': int, "
                         "'k8': int, 'k9': int, ... 2 more keys}")
        self.assertEqual(explain.bounded_shape([[[[1]]]]), "[[[list (1 item)] (1 item)] (1 item)] (1 item)")
        self.assertEqual(explain.key_text("k" * 100), "'" + "k" * 35 + "...'")
        wide = {f"key{i}": {f"inner{j}": {"x": 1} for j in range(10)} for i in range(10)}
        text = explain.bounded_shape(wide)
        self.assertLessEqual(len(text), explain.MAX_SHAPE_CHARS + 3)
        self.assertTrue(text.startswith("{'key0': dict (10 keys), "), text)

    def test_a_description_of_a_string_shows_its_start_and_what_json_text_holds(self):
        self.assertEqual(explain.describe_value("x" * 100), f"a str of 100 chars: {'x' * 60!r}...")
        self.assertEqual(explain.describe_value('  [{"a": 1}]'),
                         "a str of 12 chars: '  [{\"a\": 1}]' (JSON text: json.loads() gives a list of 1 item, "
                         "the first {'a': int})")
        self.assertEqual(explain.describe_value("[not json"), "a str of 9 chars: '[not json'")
        self.assertEqual(explain.describe_value([]), "an empty list")
        self.assertEqual(explain.describe_value({}), "an empty dict")


class ResultsTest(unittest.TestCase):
    def test_a_result_is_held_while_the_program_holds_it(self):
        results = explain.Results()
        kept = {"a": 1}
        results.add(kept, "mcp__s__t", 3)
        results.add({"b": 2}, "mcp__s__u", 4)  # nobody else holds it: forgotten at the next call
        self.assertEqual(held(results), [("dict", "mcp__s__t", 3, ()), ("dict", "mcp__s__u", 4, ())])
        results.forget_dropped()
        self.assertEqual(held(results), [("dict", "mcp__s__t", 3, ())])
        self.assertEqual(origin(results, kept), ("mcp__s__t", 3, ()))
        self.assertIsNone(origin(results, {"a": 1}), "equal is not identical")
        del kept
        results.forget_dropped()
        self.assertEqual(held(results), [])

    def test_an_older_value_the_program_dropped_is_forgotten_within_a_few_calls(self):
        results = explain.Results()
        values = [[i, i] for i in range(40)]
        for value in values:
            results.add(value, "mcp__s__t", 1)
        del values[5]
        for _ in range(40 // explain.CHECKED):
            results.forget_dropped()
        self.assertEqual(len(results._held), 39)
        self.assertEqual([value for value, *_ in results._held], values)

    def test_the_parts_the_program_holds_outlive_a_dropped_result(self):
        results = explain.Results()
        result = {"data": {"rows": [{"id": 1}], "next": "cursor-2"}, "meta": {"n": 1}}
        rows, cursor = result["data"]["rows"], result["data"]["next"]
        results.add(result, "mcp__s__t", 1)
        del result
        results.forget_dropped()
        self.assertEqual(sorted(held(results)), [("list", "mcp__s__t", 1, ("data", "rows")),
                                                 ("str", "mcp__s__t", 1, ("data", "next"))])
        self.assertEqual(origin(results, rows[0]), ("mcp__s__t", 1, ("data", "rows", 0)))
        self.assertEqual(origin(results, cursor), ("mcp__s__t", 1, ("data", "next")))

    def test_a_large_dropped_result_leaves_nothing_and_costs_no_walk(self):
        results = explain.Results()
        rows = [{"id": i} for i in range(explain.MAX_PARTS + 1)]
        row = rows[0]
        results.add(rows, "mcp__s__t", 1)
        del rows
        results.forget_dropped()
        self.assertEqual(held(results), [])
        self.assertIsNone(origin(results, row))

    def test_only_the_newest_results_are_held(self):
        results = explain.Results()
        values = [[i, i] for i in range(explain.MAX_HELD + 5)]
        for value in values:
            results.add(value, "mcp__s__t", 1)
        self.assertEqual(len(results._held), explain.MAX_HELD)
        self.assertIsNone(origin(results, values[0]))
        self.assertEqual(origin(results, values[-1]), ("mcp__s__t", 1, ()))

    def test_scalars_and_short_strings_are_never_attributed(self):
        results = explain.Results()
        for value in (1, 2.5, True, None, "", "a"):
            results.add(value, "mcp__s__t", 1)
            self.assertIsNone(origin(results, value))
        self.assertEqual(results._held, [])


class LimitsTest(unittest.TestCase):
    HOST = [explain.HOST_FILE_HINT]

    def test_only_paths_outside_the_working_directory_get_the_host_file_hint(self):
        def notes(exc):
            return explain.limit_notes(exc, "/scratch/run")

        self.assertEqual(notes(FileNotFoundError(2, "No such file", "/etc/data.csv")), self.HOST)
        self.assertEqual(notes(PermissionError(13, "Permission denied", b"/home/me/x")), self.HOST)
        self.assertEqual(notes(FileNotFoundError(2, "No such file", "../run2/x")), self.HOST)
        self.assertEqual(notes(FileNotFoundError(2, "No such file", "sub/../x.csv")), [])
        self.assertEqual(notes(FileNotFoundError(2, "No such file", "/scratch/run/x")), [])
        self.assertEqual(notes(FileNotFoundError(2, "No such file")), [])
        self.assertEqual(notes(IsADirectoryError(21, "Is a directory", "/etc")), [])

    def test_only_modules_outside_the_standard_library_get_the_module_hint(self):
        self.assertEqual(explain.limit_notes(ModuleNotFoundError("x", name="pandas.core"), "/w"),
                         [explain.MODULE_HINT])
        if hasattr(sys, "stdlib_module_names"):  # 3.10+; before, every missing module gets the hint
            self.assertEqual(explain.limit_notes(ModuleNotFoundError("x", name="_tkinter"), "/w"), [])


class JoinedSourceTest(unittest.TestCase):
    def test_the_three_parts_of_the_runner_define_no_name_twice(self):
        """They run as one module (backends/src/protocol.rs joins them): a second definition would replace
        the first for all three."""
        defined = {}
        for part in ("checks.py", "explain.py", "runner.py"):
            for node in ast.parse((SRC / part).read_text("utf-8")).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [target.id for target in node.targets if isinstance(target, ast.Name)]
                else:
                    continue
                for name in names:
                    self.assertNotIn(name, defined, f"{name} in {part} and {defined.get(name)}")
                    defined[name] = part


if __name__ == "__main__":
    unittest.main()
