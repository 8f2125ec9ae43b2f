"""Prompt sources: synthetic length, fixed text, files and JSONL datasets, and their errors."""

from __future__ import annotations

import random

import pytest

from specload.engine.prompts import TOKENS_PER_WORD, PromptError, PromptSource, load_dataset, synthetic_prompt


def test_synthetic_prompts_have_about_the_asked_length_and_differ() -> None:
    rng = random.Random(0)
    a, b = synthetic_prompt(400, rng, 1), synthetic_prompt(400, rng, 2)
    words = len(a.split())
    assert abs(words * TOKENS_PER_WORD - 400) < 0.05 * 400
    assert a != b  # distinct prompts: a prefix cache cannot serve every request


def test_dataset_keys_and_chat_shapes(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "one"}\n'
        '\n'
        '{"text": "two"}\n'
        '{"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "three"}]}\n'
        '{"conversations": [{"from": "human", "value": "four"}]}\n'
        '"five"\n'
    )
    assert load_dataset(str(f)) == ["one", "two", "three", "four", "five"]
    src = PromptSource.from_options(dataset=str(f))
    assert [src.next() for _ in range(6)] == ["one", "two", "three", "four", "five", "one"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [("{bad json\n", "not valid JSON"), ('{"other": 1}\n', "no prompt found"), ("\n\n", "no prompts")],
)
def test_bad_datasets_name_the_line(tmp_path, content: str, needle: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(PromptError, match=needle):
        load_dataset(str(f))


def test_prompt_file_and_text(tmp_path) -> None:
    f = tmp_path / "p.txt"
    f.write_text("hello from a file")
    assert PromptSource.from_options(prompt_file=str(f)).next() == "hello from a file"
    assert PromptSource.from_options(prompt="fixed").next() == "fixed"
    with pytest.raises(PromptError, match="cannot read"):
        PromptSource.from_options(prompt_file=str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("kind", ["prompt_file", "dataset"])
def test_dev_zero_is_refused_after_a_bounded_read(kind: str) -> None:
    # before: read without limit until MemoryError
    with pytest.raises(PromptError, match="larger than 16 MiB|longer than 16 MiB"):
        PromptSource.from_options(**{kind: "/dev/zero"})


def test_a_dataset_line_over_the_bound_names_its_line(tmp_path) -> None:
    f = tmp_path / "d.jsonl"
    with open(f, "wb") as out:
        out.write(b'{"prompt": "ok"}\n')
        out.write(b'{"prompt": "' + b"a" * (16 << 20) + b'"}\n')
    with pytest.raises(PromptError, match=r"d.jsonl:2: line longer than 16 MiB"):
        load_dataset(str(f))
