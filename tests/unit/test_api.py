"""API flavours: request bodies and reading one streamed event."""

from __future__ import annotations

import re

import orjson
import pytest

from specload.config import RequestConfig
from specload.engine.api import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    ChunkReader,
    MalformedChunk,
    build_body,
    error_message,
    read_full_response,
)


def test_chat_body_asks_for_usage_and_merges_extra_body() -> None:
    opts = RequestConfig(max_tokens=7, ignore_eos=True, continuous_usage=True, extra_body=(("top_k", 5),))
    b = build_body(CHAT, "hi", opts, "m")
    assert b["messages"] == [{"role": "user", "content": "hi"}]
    assert b["stream"] is True and b["max_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["top_k"] == 5 and b["model"] == "m"


def test_generate_body_is_sglang_native() -> None:
    b = build_body(GENERATE, "hi", RequestConfig(max_tokens=3, ignore_eos=True), None)
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


def test_per_request_acceptance_from_each_server_on_the_final_chunk_only() -> None:
    # vLLM (--per-request-spec-decode-metrics): top-level metrics on the usage chunk
    r = ChunkReader(CHAT)
    spec = {"speculative_decoding": {"num_spec_steps": 43, "num_accepted_draft_tokens": 10, "num_draft_tokens": 129}}
    read(r, {"choices": [{"delta": {"content": "a"}, "finish_reason": None}], "metrics": spec})
    assert r.spec_accepted is None  # a per-token chunk is not looked at
    read(r, {"choices": [], "usage": {"completion_tokens": 53}, "metrics": spec})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (43, 10, 129)
    # SGLang OpenAI: sglext.spec_tokens_details on the finish chunk
    r = ChunkReader(CHAT)
    read(r, {"choices": [{"delta": {}, "finish_reason": "stop"}], "sglext": {"spec_tokens_details": {
        "spec_verify_ct": 5, "spec_num_correct_drafts": 8, "spec_num_proposed_drafts": 15}}})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (5, 8, 15)
    # SGLang OpenAI usage: accepted and rejected prediction tokens
    r = ChunkReader(COMPLETIONS)
    read(r, {"choices": [], "usage": {"completion_tokens": 9, "completion_tokens_details": {
        "accepted_prediction_tokens": 6, "rejected_prediction_tokens": 3}}})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (None, 6, 9)
    # llama.cpp: timings' draft_n / draft_n_accepted
    r = ChunkReader(CHAT)
    read(r, {"choices": [], "usage": {"completion_tokens": 64}, "timings": {"predicted_n": 64, "draft_n": 55,
                                                                            "draft_n_accepted": 50}})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (None, 50, 55)
    # SGLang /generate: meta_info, read once it carries the finish reason; older key names too
    r = ChunkReader(GENERATE)
    read(r, {"text": "ab", "meta_info": {"completion_tokens": 2, "spec_verify_ct": 1, "spec_accept_token_num": 1}})
    assert r.spec_verify_ct is None
    read(r, {"text": "abcd", "meta_info": {"completion_tokens": 7, "spec_verify_ct": 3, "spec_accept_token_num": 4,
                                            "spec_draft_token_num": 9, "finish_reason": {"type": "stop"}}})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (3, 4, 9)


def test_per_request_acceptance_of_the_wrong_type_is_left_out_not_malformed() -> None:
    r = ChunkReader(CHAT)
    read(r, {"choices": [], "usage": {"completion_tokens": 3}, "timings": {"draft_n": "9", "draft_n_accepted": -1},
             "metrics": {"speculative_decoding": [1, 2]}, "sglext": {"spec_tokens_details": {"spec_verify_ct": 1e300}}})
    assert (r.spec_verify_ct, r.spec_accepted, r.spec_drafted) == (None, None, None)
    r = ChunkReader(GENERATE)
    read(r, {"text": "a", "meta_info": {"spec_verify_ct": "x", "finish_reason": "stop"}})
    assert r.spec_verify_ct is None and r.finish_reason == "stop"


def test_in_stream_error_is_reported() -> None:
    r = ChunkReader(CHAT)
    read(r, {"error": {"message": "engine dead", "code": 500}})
    assert r.error == "engine dead"


def test_error_message_shapes() -> None:
    assert error_message({"error": {"message": "too long", "code": 400}}) == "too long"
    assert error_message({"detail": [{"msg": "bad float"}]}) == "bad float"
    assert error_message({"message": "x"}) == "x"


# ---------------------------------------------------------------- hostile shapes, checked at the edge

WRONG_SHAPES = [
    (CHAT, b'{"choices":"abc"}', "choices is not a list"),
    (CHAT, b'{"choices":[5]}', "choices[0] is not an object"),
    (CHAT, b'{"choices":{"a":1}}', "choices is not a list"),
    (CHAT, b'{"choices":[{"delta":"text"}]}', "delta is not an object"),
    (CHAT, b'{"choices":[{"delta":{"content":["a"]}}]}', "delta.content is not a string"),
    (CHAT, b'{"choices":[{"delta":{"content":"a"},"finish_reason":7}]}', "finish_reason is not a string"),
    (CHAT, b'{"choices":[],"usage":5}', "usage is not an object"),
    (CHAT, b'{"choices":[],"usage":[1,2]}', "usage is not an object"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":"7"}}', "usage.completion_tokens is not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":1e308}}', "usage.completion_tokens is not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":18446744073709551621}}', "not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":1' + b"0" * 30 + b"}}", "not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":-4}}', "not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":true}}', "not a token count"),
    (CHAT, b'{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":2.5}}', "usage.prompt_tokens"),
    (CHAT, b"[1,2]", "not a JSON object"),
    (CHAT, b'"text"', "not a JSON object"),
    (COMPLETIONS, b'{"choices":[{"text":5}]}', "choices[0].text is not a string"),
    (GENERATE, b'{"text":5}', "text is not a string"),
    (GENERATE, b'{"text":"a","meta_info":[]}', "meta_info is not an object"),
    (GENERATE, b'{"text":"a","meta_info":{"completion_tokens":-1}}', "meta_info.completion_tokens"),
]


@pytest.mark.parametrize(("flavour", "raw", "reason"), WRONG_SHAPES)
def test_a_chunk_of_the_wrong_shape_is_malformed_with_its_reason(flavour: str, raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedChunk, match=re.escape(reason)):
        ChunkReader(flavour).read(orjson.loads(raw))


def test_nan_from_the_server_is_not_a_count() -> None:
    # orjson refuses NaN as JSON; a server's NaN reaches the reader only through a lenient parser
    with pytest.raises(MalformedChunk):
        ChunkReader(CHAT).read({"choices": [], "usage": {"completion_tokens": float("nan")}})


def test_full_answer_of_the_wrong_shape_is_malformed() -> None:
    for raw in (b"5", b'{"choices":"x"}', b'{"choices":[{"message":"hi"}]}', b'{"usage":{"completion_tokens":1e308}}'):
        with pytest.raises(MalformedChunk):
            read_full_response(CHAT, orjson.loads(raw))
    assert read_full_response(CHAT, {"choices": [{"message": {"content": "a"}, "finish_reason": "stop"}],
                                     "usage": {"completion_tokens": 3}}) == (True, 3, None, "stop")


def test_a_cumulative_count_going_backwards_leaves_the_chunk_size_unknown() -> None:
    r = ChunkReader(CHAT)
    read(r, {"choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": 5}})
    assert r.tokens == 5
    read(r, {"choices": [{"delta": {"content": "b"}}], "usage": {"completion_tokens": 3}})
    assert r.tokens is None and r.completion_tokens == 3


def test_timings_keep_finite_numbers_only() -> None:
    r = ChunkReader(CHAT)
    read(r, {"choices": [], "usage": {"completion_tokens": 1},
             "timings": {"predicted_ms": 1.5, "x": "s", "big": 1e300, "n": [1]}})
    assert r.timings == {"predicted_ms": 1.5}


def test_error_messages_are_bounded_in_depth_and_length() -> None:
    deep = orjson.loads(b'{"error":' * 900 + b'"x"' + b"}" * 900)
    assert len(error_message(deep)) < 600
    assert len(error_message({"message": "m" * 10_000})) <= 500


def test_a_conversation_is_sent_as_messages_or_as_a_transcript() -> None:
    from specload.config import RequestConfig
    from specload.engine.api import build_body

    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    assert build_body(CHAT, history, RequestConfig(), "m")["messages"] == history
    text = "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Bye\n\nAssistant:"
    assert build_body(COMPLETIONS, history, RequestConfig(), "m")["prompt"] == text
    assert build_body(GENERATE, history, RequestConfig(), None)["text"] == text


def test_the_reply_text_of_a_stream_or_a_whole_answer() -> None:
    from specload.engine.api import reply_text

    chat = (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
            b'data: {"choices":[{"delta":{"content":"Hel"},"finish_reason":null}]}\r\n\r\n'
            b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n'
            b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\ndata: {"choices":[],"usage":{}}\n\ndata: [DONE]\n\n')
    assert reply_text(CHAT, chat) == "Hello"  # the reasoning is not the reply
    comp = b'data: {"choices":[{"text":" a"}]}\n\ndata: {"choices":[{"text":" b","finish_reason":"length"}]}\n\n'
    assert reply_text(COMPLETIONS, comp) == " a b"
    gen = b'data: {"text":"ab","meta_info":{}}\n\ndata: {"text":"abcd","meta_info":{}}\n\ndata: [DONE]\n\n'
    assert reply_text(GENERATE, gen) == "abcd"  # cumulative: the last
    whole = b'{"choices":[{"message":{"role":"assistant","content":"Whole answer"}}]}'
    assert reply_text(CHAT, whole) == "Whole answer"
    assert reply_text(CHAT, b'data: not json\n\ndata: [5]\n\ndata: {"choices":"x"}\n\n') == ""
