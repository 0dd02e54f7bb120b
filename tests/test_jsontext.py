"""``placeviz.jsontext.pretty_json`` writes exactly what ``json.dumps(indent=2)`` writes.

Random nested documents (every JSON value kind, empty and nested containers, strings needing
escapes and non-ASCII), the values json encodes specially (NaN, infinities, big ints, tuples),
the documents it must hand back to ``json.dumps`` (non-string keys, subclasses, unencodable
values), and the analysis report of the fixed golden graph. No TensorFlow.
"""

from __future__ import annotations

import json
import random
from collections import Counter, OrderedDict
from enum import IntEnum
from pathlib import Path

import pytest

from placeviz.jsontext import pretty_json

GOLDEN = Path(__file__).parent / "golden" / "render" / "mlp_sync.pbtxt"
STRINGS = ["", "a", "é", "quote \" and \\ back", "line\nbreak\ttab", "\x00\x1f", "☃ snow", "𝄞 clef", "/job:ps/task:0"]


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice(STRINGS) + str(rng.randrange(100))
    if kind == 1:
        return rng.randrange(-10**20, 10**20)
    if kind == 2:
        return rng.choice([0.1, -2.5e-300, 1e300, 3.0, rng.random()])
    if kind == 3:
        return rng.choice([None, True, False])
    if kind == 4:
        return rng.randrange(10)
    if kind == 5:
        return rng.choice(STRINGS)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {rng.choice(STRINGS) + str(k): _random_value(rng, depth + 1) for k in range(rng.randrange(5))}


@pytest.mark.parametrize("seed", range(20))
def test_random_documents(seed):
    rng = random.Random(seed)
    document = {f"k{k}": _random_value(rng, 0) for k in range(8)}
    assert pretty_json(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize("document", [
    {}, [], (), "", 0, None, True, 1.5, {"a": []}, {"a": {}}, [[]], [{}], [[], {}],
    [float("nan"), float("inf"), -float("inf"), -0.0, 10**40, -(10**40)],
    {"nested": {"deeper": {"deepest": [1, [2, [3, {}]]]}}},
])
def test_edge_values(document):
    assert pretty_json(document) == json.dumps(document, indent=2)


class Level(IntEnum):
    LOW = 1


@pytest.mark.parametrize("document", [
    {1: "int key"}, {None: 1, True: 2, 1.5: 3}, Counter("abca"), {"c": Counter("xyy")}, OrderedDict(a=1),
    [Level.LOW], {"level": Level.LOW},
])
def test_what_json_encodes_its_own_way_is_left_to_json(document):
    assert pretty_json(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize("document", [{"a": {1, 2}}, [object()], {"b": b"bytes"}])
def test_what_json_rejects_is_rejected(document):
    with pytest.raises(TypeError):
        json.dumps(document, indent=2)
    with pytest.raises(TypeError):
        pretty_json(document)


def test_the_analysis_report_of_a_real_graph():
    from placeviz.pipeline import Options, run_pipeline
    from placeviz.placement import PlacementOptions
    from placeviz.placement.setter import SetterConfig

    report = run_pipeline(str(GOLDEN), Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=0)))).report.to_json()
    text = pretty_json(report)
    assert text == json.dumps(report, indent=2)
    assert len(text) > 1000 and json.loads(text) == json.loads(json.dumps(report))


@pytest.mark.parametrize("seed", range(10))
def test_the_two_output_forms_hold_the_same_content(seed):
    """``json_text`` (every JSON report): compact is ``json.dumps``'s C-encoder text, ``pretty`` the
    indented text, both in the document's key order, ending in a newline, parsing to equal values."""
    from placeviz.jsontext import json_text

    rng = random.Random(seed)
    document = {f"k{k}": _random_value(rng, 0) for k in range(8)}
    compact, pretty = json_text(document), json_text(document, pretty=True)
    assert compact == json.dumps(document, separators=(",", ":")) + "\n"
    assert pretty == json.dumps(document, indent=2) + "\n"
    assert json.loads(compact) == json.loads(pretty)
    assert compact.isascii() and pretty.isascii()
    assert "\n" not in compact[:-1]  # one line: strings' newlines are escaped
