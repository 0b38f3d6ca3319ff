"""An agentic session's messages and the hits its turns should show (docs/measurement.md, "Agentic sessions"):
pure, no engine."""

from __future__ import annotations

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.conversation import (
    Conversation,
    block_size,
    expected_hits,
    opening,
    tool_result,
)
from labkit.measure.server.metrics import parse_prometheus


def test_the_expected_hits_are_the_previous_prompt_to_its_answer_in_whole_blocks():
    # previous prompt 1,000 tokens, answer 32, this prompt 1,600, blocks of 128
    assert expected_hits(1000, 32, 1600, 128) == (896, 1024)
    assert expected_hits(1000, 32, 1600, None) == (1000, 1031)  # block unknown: counted in tokens
    assert expected_hits(1000, 32, 1001, 16) == (992, 992)  # never the prompt's last token
    assert expected_hits(100, 4, 900, 128) == (0, 0)  # less than a block: nothing to hit
    assert expected_hits(None, None, 900, 128) is None and expected_hits(1000, 32, None, 128) is None


def test_a_session_grows_by_the_answer_and_a_tool_result():
    conv = Conversation()
    conv.open(opening("00ff00ff00ff", "s"))
    assert conv.messages[0]["content"].startswith("[00ff00ff00ff agentic] ")
    conv.turn_done(57, 16)
    conv.follow("the answer", tool_result("s:1", 200, 1))
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user"]
    assert conv.messages[1]["content"] == "the answer" and (conv.prev_prompt, conv.prev_output) == (57, 16)


def test_tool_results_are_seeded_and_about_their_size():
    a, b = tool_result("seed", 500, 2), tool_result("seed", 500, 2)
    assert a == b and a != tool_result("other", 500, 2)
    body = a.rsplit("\n\nWhat does this tell you?", 1)[0]
    assert 490 <= pr.pieces(body) <= 500 and body.startswith("Tool result (")
    assert pr.pieces(tool_result("seed", 2000, 3)) > 1900


def test_the_block_size_comes_from_vllms_cache_config_labels():
    text = 'vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0"} 1.0\n'
    assert block_size(parse_prometheus(text)) == 128
    assert block_size(parse_prometheus("vllm:num_requests_running 0\n")) is None and block_size(None) is None
