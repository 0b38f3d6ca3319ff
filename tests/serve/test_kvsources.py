"""The KV pool's sources (issue 16, item 3), parsed from the engines' real formats and compared: the boot-log
lines each adapter keeps raw, vLLM's `vllm:cache_config_info` labels (the CPU build's real scrape, and
DeepSeek-V4's hybrid line from vllm-project/vllm#51163), SGLang's /server_info and gauge; agreement,
disagreement beyond the tolerance, and what is absent with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from labkit.serve import api_sources, kv_pool, parse_prometheus
from labkit.serve.engines import Engine
from labkit.serve.engines.llamacpp import LlamaCpp
from labkit.serve.engines.sglang import Sglang
from labkit.serve.engines.sim import Sim
from labkit.serve.engines.vllm import Vllm
from labkit.serve.kvsources import BLOCKS, cache_config_source, gauge_source, server_info_source

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "vllm-0.32-cpu"

# vllm-project/vllm#51163 (serve B): DeepSeek-V4-Flash, --block-size 256, fp8_ds_mla
DSV4_LINE = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="4",cache_dtype="fp8_ds_mla",'
    'enable_prefix_caching="True",gpu_memory_utilization="0.85",kv_cache_size_tokens="1179770",'
    'num_gpu_blocks="20377",sliding_window="128",user_specified_block_size="True"} 1.0\n'
)
# SGLang 0.5 /server_info: server args and scheduler info merged at the top level, one state per DP rank
SGLANG_INFO = {
    "model_path": "/models/qwen",
    "tp_size": 2,
    "max_total_num_tokens": 1_456_832,
    "max_req_input_len": 131_066,
    "version": "0.5.23",
    "internal_states": [
        {
            "memory_usage": {"weight": 15.3, "kvcache": 33.34, "token_capacity": 1_456_832, "graph": 0.61},
            "last_gen_throughput": 0.0,
        }
    ],
}
SGLANG_LOG = [
    "[2026-10-23 10:01:02 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1456832, "
    "K size: 16.67 GB, V size: 16.67 GB",
    "[2026-10-23 10:01:03 TP0] max_total_num_tokens=1456832, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=4096, context_len=131072, available_gpu_mem=10.20 GB",
]


def boot(engine: Engine, lines: list[str]):
    log = engine.boot_log("head", True)
    log.feed("\n".join(lines) + "\n")
    return engine.facts(log.matches)


def test_vllms_real_cpu_scrape_gives_blocks_size_and_tokens_with_every_label():
    samples = parse_prometheus((FIXTURES / "c1.before.prom").read_text())
    src = cache_config_source(samples)
    assert (src["num_gpu_blocks"], src["block_size"], src["kv_cache_size_tokens"]) == (4096, 128, 524_288)
    assert src["blocks_x_block_size"] == 524_288
    assert src["labels"]["kv_cache_memory_bytes"] == "1073741824" and len(src["labels"]) > 30
    assert "series" not in src  # one engine


def test_the_real_cpu_boot_line_and_scrape_agree():
    facts = boot(Vllm(), (FIXTURES / "boot-ngram.log").read_text().splitlines())
    log = Vllm().kv_sources(facts)
    assert log == {"log": {"tokens": 524_288, "raw": facts.lines["kv_tokens"], "line": "kv_tokens"}}
    assert "CPU KV cache size: 524,288 tokens" in log["log"]["raw"]
    sources, absent = api_sources((200, (FIXTURES / "c1.before.prom").read_text()), (404, ""))
    pool = kv_pool({**log, **sources}, absent)
    assert (pool["tokens"], pool["chosen"], pool["disagree"]) == (524_288, "log", False)
    assert pool["figures"] == {
        "log": 524_288,
        "cache_config_info.kv_cache_size_tokens": 524_288,
        BLOCKS: 524_288,
    }
    assert pool["absent"] == {"server_info": "/server_info: HTTP 404"}
    assert pool["message"].startswith("524,288 tokens (log); ") and pool["message"].endswith(" agree")


def test_a_hybrid_layout_disagrees_and_names_both_numbers():
    src = cache_config_source(parse_prometheus(DSV4_LINE))
    assert src["blocks_x_block_size"] == 81_508 and src["labels"]["cache_dtype"] == "fp8_ds_mla"
    log = {
        "log": {"tokens": 1_179_770, "raw": "GPU KV cache size: 1,179,770 tokens, ...", "line": "kv_tokens"}
    }
    pool = kv_pool({**log, "cache_config_info": src})
    assert pool["disagree"] and pool["tokens"] == 1_179_770 and pool["chosen"] == "log"
    msg = pool["message"]
    assert "20,377 * 4 = 81,508" in msg and "log 1,179,770" in msg
    assert "labkit reports 1,179,770 tokens (log)" in msg and "hybrid" in msg
    # without the log (a bare URL) the API's own token label is reported, and the product still disagrees
    alone = kv_pool({"cache_config_info": src})
    assert alone["chosen"] == "cache_config_info.kv_cache_size_tokens" and alone["disagree"]


def test_blocks_times_size_within_one_percent_agrees_and_a_token_count_must_be_equal():
    cc = {"num_gpu_blocks": 1000, "block_size": 100, "blocks_x_block_size": 100_000}
    for tokens, disagree in ((99_200, False), (100_900, False), (98_900, True)):
        pool = kv_pool({"log": {"tokens": tokens}, "cache_config_info": cc})
        assert pool["disagree"] is disagree, tokens
    pool = kv_pool({"log": {"tokens": 100_000}, "cache_config_info": {**cc, "kv_cache_size_tokens": 99_999}})
    assert (
        pool["disagree"] and "cache_config_info.kv_cache_size_tokens 99,999 vs log 100,000" in pool["message"]
    )
    assert "hybrid" not in pool["message"]


def test_labels_a_build_leaves_out_or_sets_to_none_are_absent():
    text = 'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="None",num_gpu_blocks="None"} 1.0\n'
    src = cache_config_source(parse_prometheus(text))
    assert src["block_size"] == 16 and "kv_cache_size_tokens" not in src and "blocks_x_block_size" not in src
    assert kv_pool({"cache_config_info": src})["tokens"] is None
    # only the product: reported, with the caveat
    only = kv_pool(
        {"cache_config_info": {"num_gpu_blocks": 10, "block_size": 16, "blocks_x_block_size": 160}}
    )
    assert only["tokens"] == 160 and only["chosen"] == BLOCKS and "only figure" in only["message"]


def test_data_parallel_engines_take_engine_0s_series():
    text = (
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="10"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="20"} 1.0\n'
    )
    src = cache_config_source(parse_prometheus(text))
    assert src["num_gpu_blocks"] == 20 and src["series"] == 2


def test_sglang_server_info_gauge_and_both_log_lines_agree():
    info = server_info_source(SGLANG_INFO)
    assert info["max_total_num_tokens"] == 1_456_832 and info["token_capacity"] == 1_456_832
    assert info["raw"]["max_total_num_tokens"] == 1_456_832
    assert info["raw"]["internal_states[].memory_usage"][0]["kvcache"] == 33.34
    nested = server_info_source({"scheduler_info": {"max_total_num_tokens": 7}})
    assert nested["raw"] == {"scheduler_info.max_total_num_tokens": 7}
    gauge = gauge_source(parse_prometheus('sglang:max_total_num_tokens{model_name="q"} 1456832.0\n'))
    assert gauge["tokens"] == 1_456_832 and gauge["raw"][0]["labels"] == {"model_name": "q"}
    facts = boot(Sglang(), SGLANG_LOG)
    log = Sglang().kv_sources(facts)
    assert log["log"] == {"tokens": 1_456_832, "raw": SGLANG_LOG[1], "line": "capacity"}
    assert log["log_allocated"]["tokens"] == 1_456_832 and log["log_allocated"]["raw"] == SGLANG_LOG[0]
    assert facts.kv_pool_tokens == 1_456_832  # as before
    metrics = "sglang:max_total_num_tokens 1456832.0\n"
    sources, absent = api_sources((200, metrics), (200, json.dumps(SGLANG_INFO)))
    pool = kv_pool({**log, **sources}, absent)
    assert not pool["disagree"] and pool["chosen"] == "log" and "absent" not in pool
    assert set(pool["figures"]) == {
        "log",
        "log_allocated",
        "server_info.max_total_num_tokens",
        "server_info.token_capacity",
        "sglang:max_total_num_tokens",
    }


def test_llamacpp_cells_and_what_an_engine_without_api_leaves_absent():
    line = (
        "llama_kv_cache: size =   32.00 MiB ( 16384 cells,   4 layers,  1/1 seqs), "
        "K (f16):   16.00 MiB, V (f16):   16.00 MiB"
    )
    log = LlamaCpp().kv_sources(boot(LlamaCpp(), [line]))
    assert log == {"log": {"tokens": 16384, "raw": line, "line": "kv_tokens"}}
    sources, absent = api_sources((404, ""), (None, "ConnectionRefusedError: [Errno 111] Connection refused"))
    assert sources == {} and absent == {
        "metrics": "/metrics: HTTP 404",
        "server_info": "/server_info: ConnectionRefusedError: [Errno 111] Connection refused",
    }
    pool = kv_pool(log, absent)
    assert pool["tokens"] == 16384 and pool["message"] == "16,384 tokens (log), the only figure"
    none = kv_pool({}, absent)
    assert none["tokens"] is None and not none["disagree"] and "/metrics: HTTP 404" in none["message"]


def test_a_metrics_page_or_server_info_without_a_pool_figure_says_so():
    sources, absent = api_sources((200, "vllm:num_requests_running 0.0\n"), (200, '{"version": "x"}'))
    assert sources == {}
    assert absent["metrics"].startswith("/metrics has neither vllm:cache_config_info")
    assert absent["server_info"] == "/server_info has no max_total_num_tokens"
    assert (
        api_sources((200, ""), (200, "not json"))[1]["server_info"]
        == "/server_info has no max_total_num_tokens"
    )


def test_the_simulator_adapter_reads_its_flavours_lines():
    assert Sim("sglang").kv_lines == Sglang.kv_lines and Sim("vllm").kv_lines == Vllm.kv_lines
    facts = boot(Sim("sglang"), SGLANG_LOG)
    assert set(Sim("sglang").kv_sources(facts)) == {"log", "log_allocated"}
