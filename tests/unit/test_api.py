"""API flavours: request bodies and reading one streamed event."""

from __future__ import annotations

import orjson

from specload.engine.api import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    ChunkReader,
    RequestOptions,
    build_body,
    error_message,
)


def test_chat_body_asks_for_usage_and_merges_extra_body() -> None:
    opts = RequestOptions(model="m", max_tokens=7, ignore_eos=True, continuous_usage=True,
                          extra_body=(("top_k", 5),))
    b = build_body(CHAT, "hi", opts)
    assert b["messages"] == [{"role": "user", "content": "hi"}]
    assert b["stream"] is True and b["max_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["top_k"] == 5 and b["model"] == "m"


def test_generate_body_is_sglang_native() -> None:
    b = build_body(GENERATE, "hi", RequestOptions(model=None, max_tokens=3, ignore_eos=True))
    assert b == {"text": "hi", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}, "stream": True}


def read(reader: ChunkReader, obj: dict) -> ChunkReader:
    reader.read(orjson.loads(orjson.dumps(obj)))
    return reader


def test_chat_role_only_chunk_is_not_text_and_usage_chunk_counts() -> None:
    r = ChunkReader(CHAT)
    read(r, {"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert not r.has_text
    read(r, {"choices": [{"delta": {"content": "Hel"}}]})
    assert r.has_text and r.tokens is None
    read(r, {"choices": [{"delta": {}, "finish_reason": "length"}]})
    assert not r.has_text and r.finish_reason == "length"
    read(r, {"choices": [], "usage": {"completion_tokens": 9, "prompt_tokens": 4}})
    assert r.completion_tokens == 9 and r.prompt_tokens == 4 and not r.has_text


def test_continuous_usage_gives_tokens_per_chunk() -> None:
    r = ChunkReader(CHAT)
    read(r, {"choices": [{"delta": {"content": "a b c"}}], "usage": {"completion_tokens": 3}})
    assert r.tokens == 3
    read(r, {"choices": [{"delta": {"content": "d"}}], "usage": {"completion_tokens": 4}})
    assert r.tokens == 1


def test_llamacpp_completions_last_chunk_has_usage_and_timings() -> None:
    r = ChunkReader(COMPLETIONS)
    read(r, {"choices": [{"text": " fox", "finish_reason": "length"}], "usage": {"completion_tokens": 5},
             "timings": {"predicted_n": 5}})
    assert r.has_text and r.completion_tokens == 5 and r.finish_reason == "length"
    assert r.timings == {"predicted_n": 5}


def test_generate_cumulative_text_and_meta_info() -> None:
    r = ChunkReader(GENERATE)
    read(r, {"text": "ab", "meta_info": {"completion_tokens": 2, "prompt_tokens": 3}})
    assert r.has_text and r.tokens == 2
    read(r, {"text": "ab", "meta_info": {"completion_tokens": 2}})
    assert not r.has_text
    read(r, {"text": "abcd", "meta_info": {"completion_tokens": 5, "spec_verify_ct": 2,
                                            "finish_reason": {"type": "length"}}})
    assert r.tokens == 3 and r.spec_verify_ct == 2 and r.finish_reason == "length"


def test_in_stream_error_is_reported() -> None:
    r = ChunkReader(CHAT)
    read(r, {"error": {"message": "engine dead", "code": 500}})
    assert r.error == "engine dead"


def test_error_message_shapes() -> None:
    assert error_message({"error": {"message": "too long", "code": 400}}) == "too long"
    assert error_message({"detail": [{"msg": "bad float"}]}) == "bad float"
    assert error_message({"message": "x"}) == "x"
