"""Datasets: the built-in multi-domain set (its size, categories, turns, lengths, interleaving, the
choice of categories) and the readers of other tools' files (ShareGPT as a JSON array and as JSONL,
OpenAI messages, plain prompts), with categories, reference output lengths and hostile files."""

from __future__ import annotations

import re

import orjson
import pytest

from specload.config import ConfigError, RequestConfig
from specload.data import DATA_DIR
from specload.engine.datasets import (
    PromptError,
    builtin_categories,
    estimate_tokens,
    load_builtin,
    load_dataset,
)
from specload.engine.prompts import PromptSource

# ------------------------------------------------------------------------------- the built-in set


def test_the_builtin_set_has_eight_categories_of_forty_prompts_with_turns_and_varied_lengths() -> None:
    ds = load_builtin()
    cats = ds.describe()["categories"]
    assert list(cats) == list(builtin_categories())
    assert len(cats) >= 8 and min(cats.values()) >= 40, cats
    turns = [len(c.turns) for c in ds.conversations]
    assert min(turns) == 1 and max(turns) == 5 and sum(t > 1 for t in turns) >= 30
    for c in ds.conversations:
        assert c.category in cats
        for t in c.turns:
            assert t.strip() and "{{" not in t, t[:80]  # every passage named is in place
    words = [len(c.turns[0].split()) for c in ds.conversations]
    assert min(words) < 10 and max(words) > 1500  # from a short question to a passage of ~2k tokens
    assert sum(w > 500 for w in words) >= 20
    texts = [c.turns for c in ds.conversations]
    assert len(set(texts)) == len(texts)  # no prompt twice
    for cat in ("summarise", "extract", "rewrite"):  # the passages serve several kinds of task
        assert sum(len(c.turns[0].split()) > 300 for c in ds.conversations if c.category == cat) >= 10


def test_every_passage_is_used_and_the_data_is_small() -> None:
    prompts = (DATA_DIR / "prompts.jsonl").read_text()
    for line in (DATA_DIR / "passages.jsonl").read_text().splitlines():
        pid = orjson.loads(line)["id"]
        assert "{{" + pid + "}}" in prompts, pid
    refs = set(re.findall(r"\{\{([a-z0-9-]+)\}\}", prompts))
    assert len(refs) >= 15
    size = sum(p.stat().st_size for p in DATA_DIR.glob("*.jsonl"))
    assert size < 200_000  # the package stays small: the passages are shared, not repeated


def test_builtin_interleaves_its_categories_and_a_choice_keeps_its_order() -> None:
    ds = load_builtin()
    cats = builtin_categories()
    assert [c.category for c in ds.conversations[: 2 * len(cats)]] == list(cats) * 2
    some = load_builtin("builtin:math,coding")
    assert some.name == "builtin:math,coding"
    assert [c.category for c in some.conversations[:4]] == ["math", "coding", "math", "coding"]
    assert {c.category for c in some.conversations} == {"math", "coding"}
    assert len(some.conversations) == ds.describe()["categories"]["math"] + ds.describe()["categories"]["coding"]
    assert load_builtin("builtin:" + ",".join(cats)).name == "builtin"  # all of them, by name
    # the source sends each row's first turn, tagged with its category
    src = PromptSource.from_options(dataset="builtin:coding")
    got = [src.next() for _ in range(3)]
    assert [p.category for p in got] == ["coding"] * 3 and got[0].text == some.conversations[1].turns[0]


@pytest.mark.parametrize("spec", ["builtin:code", "builtin:", "builtin:chat,,nope"])
def test_a_bad_builtin_category_is_one_line_listing_the_valid_ones(spec: str) -> None:
    with pytest.raises(PromptError) as e:
        load_dataset(spec)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"--dataset {spec}: unknown category")
    assert "chat, coding, math, summarise, extract, translate, rewrite, creative" in msg


def test_the_answers_rule_is_said_and_recorded() -> None:
    src = PromptSource.from_options(dataset="builtin", max_tokens=300)
    assert src.describe()["output"] == "natural stops (EOS), capped at 300 tokens (--max-tokens)"
    assert src.summary().startswith("prompts: builtin (8 categories, ")
    assert "answers: natural stops (EOS), capped at 300 tokens" in src.summary()
    forced = PromptSource.from_options(dataset="builtin", ignore_eos=True)
    assert forced.describe()["output"].startswith("ignore_eos, 256 tokens each")
    assert src.describe()["dataset"]["sha256"] == forced.describe()["dataset"]["sha256"]


# ------------------------------------------------------------------------------- other tools' files

SHAREGPT = [
    {"id": "a1", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello! " * 10},
                                   {"from": "human", "value": "Tell me a joke"}, {"from": "gpt", "value": "No."}]},
    {"id": "a2", "conversations": []},  # ShareGPT_V3 has these: left out, counted
    {"id": "a3", "conversations": [{"from": "gpt", "value": "I start"}, {"from": "human", "value": "Then me"}]},
    {"id": "a4", "category": "coding", "output_tokens": 77,
     "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Write a loop"}]},
]


@pytest.mark.parametrize("container", ["json", "jsonl"])
def test_sharegpt_as_a_json_array_and_as_jsonl(tmp_path, container: str) -> None:
    f = tmp_path / f"sg.{container}"
    if container == "json":
        f.write_bytes(orjson.dumps(SHAREGPT, option=orjson.OPT_INDENT_2))
    else:
        f.write_bytes(b"\n".join(orjson.dumps(r) for r in SHAREGPT) + b"\n")
    ds = load_dataset(str(f))
    assert ds.format == "sharegpt" and ds.skipped == 1
    a1, a3, a4 = ds.conversations
    assert a1.turns == ("Hi there", "Tell me a joke")
    assert a1.output_tokens == estimate_tokens("Hello! " * 10) == 13 and a1.output_estimated  # from its first reply
    assert a3.turns == ("Then me",) and a3.output_tokens is None  # a reply before any user turn is no reference
    assert (a4.category, a4.output_tokens, a4.output_estimated) == ("coding", 77, False)
    assert ds.describe()["reference_output"] == {"given": 1, "estimated_from_reply": 1}
    assert load_dataset(str(f), "sharegpt").conversations == ds.conversations
    with pytest.raises(PromptError, match=r"row 1: expected an object with \"messages\"|:1: expected an object with \"messages\""):
        load_dataset(str(f), "openai")


def test_openai_messages_multi_turn_with_content_parts_and_categories(tmp_path) -> None:
    f = tmp_path / "chat.jsonl"
    rows = [
        {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
                      {"role": "assistant", "content": "a1 a1 a1"}, {"role": "user", "content": "q2"}],
         "category": "chat"},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"},
                                                   {"type": "image_url", "image_url": {"url": "x"}},
                                                   {"type": "text", "text": "here"}]}], "output_len": 12},
    ]
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    ds = load_dataset(str(f))
    assert ds.format == "openai"
    c1, c2 = ds.conversations
    assert (c1.turns, c1.category, c1.output_tokens) == (("q1", "q2"), "chat", 4)
    assert (c2.turns, c2.output_tokens) == (("look\nhere",), 12)
    assert ds.describe()["multi_turn"] == 1 and ds.describe()["categories"] == {"chat": 1}


def test_output_len_dataset_sends_the_reference_length_with_ignore_eos(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "a", "output_tokens": 40}\n{"prompt": "b"}\n{"prompt": "c", "category": "x", "output_len": 9}\n')
    src = PromptSource.from_options(dataset=str(f), output_len="dataset", ignore_eos=True)
    got = [src.next() for _ in range(3)]
    assert [(p.text, p.max_tokens, p.category) for p in got] == [("a", 40, None), ("b", None, None), ("c", 9, "x")]
    assert src.describe()["output"].startswith("the dataset's reference lengths with ignore_eos")
    plain = PromptSource.from_options(dataset=str(f))  # the default: the lengths are the run's cap
    assert [plain.next().max_tokens for _ in range(3)] == [None, None, None]
    cfg = RequestConfig(dataset=str(f), output_len="dataset")
    assert cfg.ignore_eos
    with pytest.raises(ConfigError, match="--output-len dataset needs --dataset"):
        RequestConfig(output_len="dataset")
    with pytest.raises(ConfigError, match="--dataset-format applies to --dataset"):
        RequestConfig(dataset_format="sharegpt")


def test_a_trace_given_as_a_dataset_says_to_use_trace(tmp_path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n')
    with pytest.raises(PromptError, match=r"t.jsonl:1: is a trace row .* --trace FILE"):
        load_dataset(str(f))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x00\x01binary\xff", "not a text file"),
        (b'{"prompt": "ok"}\n\xff\xfe{"prompt": "x"}\n', r":2: not valid JSON"),
        (b'{"prompt": 5}\n', r":1: 'prompt' is not a string"),
        (b'{"messages": "hi"}\n', r":1: 'messages' is not a list"),
        (b'{"messages": [{"role": "user", "content": 7}]}\n', r"messages\[0\].content is not a string"),
        (b'{"messages": [{"role": 1, "content": "x"}]}\n', r"messages\[0\].role is not a string"),
        (b'{"conversations": [["human", "hi"]]}\n', r"conversations\[0\] is not an object"),
        (b'{"prompt": "x", "category": 3}\n', "'category' is not a string"),
        (b'{"prompt": "x", "output_tokens": "many"}\n', "'output_tokens' is not a whole number"),
        (b'{"prompt": "x", "output_tokens": true}\n', "'output_tokens' is not a whole number"),
        (b'{"prompt": "x", "output_tokens": 1e300}\n', "'output_tokens' is not a whole number"),
        (b'[1, 2]', r"row 1: expected JSONL or a JSON array"),
        (b'[{"prompt": "a"}', "not valid JSON"),
        (b'{"prompt": "x", "output_len": 123456789012345678901234567890}\n', "'output_len' is not a whole number"),
        (b"[" * 5000 + b"]" * 5000, "not valid JSON"),
        (b'{"a": 1}\n', r"expected JSONL or a JSON array of prompts.*found an object with keys a"),
        (b'{"conversations": [{"from": "gpt", "value": "only a reply"}]}\n', r"no prompts \(1 rows without a user turn\)"),
        (b"just some text\n", "not valid JSON"),
        (b"", "no prompts"),
    ],
)
def test_hostile_files_get_one_line_never_a_traceback(tmp_path, content: bytes, needle: str) -> None:
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    with pytest.raises(PromptError, match=needle) as e:
        load_dataset(str(f))
    assert "\n" not in str(e.value) and len(str(e.value)) < 400
    assert str(f) in str(e.value)


def test_a_file_that_matches_no_format_names_what_was_expected(tmp_path) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text('{"question_id": 1, "turns": ["hi"]}\n')
    with pytest.raises(PromptError) as e:
        load_dataset(str(f))
    for shape in ("plain", "sharegpt", "openai"):
        assert shape in str(e.value)
    with pytest.raises(PromptError, match=r"expected a string or an object with one of prompt"):
        load_dataset(str(f), "plain")
    with pytest.raises(PromptError, match="--dataset-format must be one of"):
        load_dataset(str(f), "csv")


def test_a_file_read_once_is_not_read_again_unless_it_changed(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "one"}\n')
    a = load_dataset(str(f))
    assert load_dataset(str(f)) is a  # the CLI's preflight read it; the session asks again
    f.write_text('{"prompt": "two"}\n{"prompt": "three"}\n')
    b = load_dataset(str(f))
    assert [c.turns[0] for c in b.conversations] == ["two", "three"] and b.digest != a.digest


def test_system_messages_are_kept_and_sent_first(tmp_path) -> None:
    f = tmp_path / "sys.jsonl"
    rows = [{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "q1"}]},
            {"conversations": [{"from": "system", "value": "Be kind."}, {"from": "human", "value": "hi"},
                               {"from": "gpt", "value": "hello"}, {"from": "human", "value": "bye"}]},
            {"prompt": "plain"}]
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    ds = load_dataset(str(f))
    assert [c.system for c in ds.conversations] == ["You are terse.", "Be kind.", None]
    src = PromptSource.from_options(dataset=str(f))
    assert src.next().body() == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "q1"}]
    assert src.next().body()[0] == {"role": "system", "content": "Be kind."}
    assert src.next().body() == "plain"  # no system message: the text, as before


def test_multi_turn_sends_the_conversations_and_says_so(tmp_path) -> None:
    src = PromptSource.from_options(dataset="builtin", multi_turn=True, think_time="2:1", seed=3)
    info = src.describe()
    assert info["multi_turn"] == {"conversations": 40, "think_time": "2:1"} and src.rows == 40
    assert "40 conversations of 2-5 user turns sent turn by turn" in src.summary()
    assert "2:1 s between turns (--multi-turn)" in src.summary()
    convs = [src.next_conversation() for _ in range(41)]
    assert [c.number for c in convs[:3]] == [1, 2, 3] and all(len(c.turns) >= 2 for c in convs)
    assert convs[40].turns == convs[0].turns  # the 41st is the first again
    assert {c.category for c in convs} == set(builtin_categories())
    pauses = [src.think_s() for _ in range(200)]
    assert 1.0 <= min(pauses) < 1.3 and 2.7 < max(pauses) <= 3.0
    again = PromptSource.from_options(dataset="builtin", multi_turn=True, think_time="2:1", seed=3)
    assert [again.think_s() for _ in range(200)] == pauses  # drawn from the seed
    single = tmp_path / "single.jsonl"
    single.write_text('{"prompt": "a"}\n')
    with pytest.raises(PromptError, match="no row of two or more user turns"):
        PromptSource.from_options(dataset=str(single), multi_turn=True)
    with pytest.raises(ConfigError, match="--multi-turn needs --dataset"):
        RequestConfig(multi_turn=True)
    with pytest.raises(ConfigError, match="--think-time applies to --multi-turn"):
        RequestConfig(dataset="builtin", think_time="2")


@pytest.mark.parametrize(("spec", "kind", "values"), [
    ("0", "fixed", (0.0,)), ("1.5", "fixed", (1.5,)), ("2:1", "uniform", (2.0, 1.0)), ("exp:3", "exp", (3.0,)),
    ("0.5,1,2", "choice", (0.5, 1.0, 2.0)),
])
def test_think_time_specs(spec: str, kind: str, values: tuple) -> None:
    from specload.plan import ThinkTime

    t = ThinkTime.parse(spec)
    assert (t.kind, t.values) == (kind, values) and ThinkTime.parse(t.spec) == t


@pytest.mark.parametrize("spec", ["-1", "2:3", "exp:1:1", "x", "1,,2", "100000", "1,-2", ""])
def test_bad_think_time_specs_say_what_is_expected(spec: str) -> None:
    from specload.plan import ThinkTime

    with pytest.raises(ValueError, match="expected seconds S, MEAN:SPREAD"):
        ThinkTime.parse(spec)
