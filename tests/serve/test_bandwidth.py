"""The `doctor --bandwidth` builders and parsers (labkit.serve.bandwidth): text in, figures out, every shell
argument quoted, and a garbled report refused with a message saying what was missing."""

from __future__ import annotations

import pytest

from labkit.errors import LabkitError
from labkit.serve.bandwidth import (
    ALL_REDUCE,
    IB_WRITE_BW,
    absent,
    all_reduce_argv,
    ib_client_argv,
    ib_client_command,
    ib_server_argv,
    ib_server_command,
    measured,
    parse_all_reduce,
    parse_ib_write_bw,
    parse_which,
)
from tests.support.all_reduce_perf_shim import REPORT as ALL_REDUCE_REPORT
from tests.support.ib_write_bw_shim import REPORT as IB_REPORT

ROW = " 65536      10000           96.52              96.48              0.184016"


def test_ib_write_bw_commands_match_the_perftest_form_and_quote_every_argument():
    assert ib_server_argv("rocep1s0f1") == [
        "ib_write_bw",
        "-d",
        "rocep1s0f1",
        "-F",
        "--report_gbits",
        "-D",
        "5",
    ]
    assert ib_client_argv("rocep1s0f1", "10.0.0.2")[-1] == "10.0.0.2"
    assert ib_server_command("x y", limit=30) == "timeout 30 ib_write_bw -d 'x y' -F --report_gbits -D 5"
    assert "ib_write_bw -d rocep1s0f1 -F --report_gbits -D 5 '10.0.0.2;rm'" in ib_client_command(
        "rocep1s0f1", "10.0.0.2;rm"
    )


def test_all_reduce_runs_under_mpirun_over_the_lane_when_mpirun_exists():
    test = ["all_reduce_perf", "-b", "8M", "-e", "1G", "-f", "2", "-g", "1"]
    assert all_reduce_argv([], mpirun=False) == test
    assert all_reduce_argv(["10.0.0.1", "10.0.0.2"], mpirun=True) == [
        "mpirun", "-np", "2", "-H", "10.0.0.1,10.0.0.2", *test
    ]  # fmt: skip


def test_ib_write_bw_table_gives_the_average_gbits():
    assert parse_ib_write_bw(IB_REPORT.format(device="rocep1s0f1")) == (96.48, ROW.strip())


def test_all_reduce_report_gives_the_average_bus_bandwidth():
    assert parse_all_reduce(ALL_REDUCE_REPORT) == (21.3456, "# Avg bus bandwidth    : 21.3456")


@pytest.mark.parametrize(
    "text, said",
    [
        ("Couldn't connect to 10.0.0.2:18515\n", "no '#bytes #iterations"),
        (
            IB_REPORT.replace(ROW, " 65536  10000  96.52  n/a  0.18"),
            "not 5 numbers: '65536  10000  96.52  n/a",
        ),
        (IB_REPORT.split(ROW)[0], "no row of figures"),
    ],
)
def test_a_garbled_ib_write_bw_table_is_refused_saying_what_is_wrong(text, said):
    with pytest.raises(LabkitError, match="ib_write_bw") as e:
        parse_ib_write_bw(text)
    assert said in str(e.value)
    assert measured("a-b", IB_WRITE_BW, True, text).figure is None
    assert measured("a-b", IB_WRITE_BW, True, text).line.startswith("unreadable: ib_write_bw")


def test_a_report_without_the_avg_bus_line_is_refused():
    with pytest.raises(LabkitError, match="Avg bus bandwidth"):
        parse_all_reduce(ALL_REDUCE_REPORT.replace("# Avg bus bandwidth    : 21.3456\n", ""))


def test_results_of_a_failed_run_and_an_absent_tool_say_why():
    failed = measured("a-b", ALL_REDUCE, False, "", "some warning\nNCCL error: unhandled system error\n")
    assert (failed.figure, failed.line) == (None, "failed: NCCL error: unhandled system error")
    gone = absent("a-b", IB_WRITE_BW, ["dgx6"])
    assert gone.figure is None and gone.line == "absent: ib_write_bw is not on the PATH of dgx6"
    assert parse_which("ib_write_bw /usr/bin/ib_write_bw\nmpirun /usr/bin/mpirun\n") == {
        "ib_write_bw",
        "mpirun",
    }
