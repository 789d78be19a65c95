"""The command line's help is written for people: plain text, every option explained,
the methods named, short; and ``fedep --version`` / ``fedep --help`` load no library."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from fedep.cli import build_parser, main
from fedep.cli._common import COMMANDS, METHOD_HELP
from fedep.detectors import METHODS, detector_param_table
from fedep.params import pipeline_table, plain_text

_RST = (":func:", ":class:", ":mod:", ":meth:", ":data:", ":attr:", "``", "`")

#: Line budgets at 100 columns (the help's widest layout; at 80 columns it wraps more).
# federate also carries the deployment roles (--role server|gateway|keys and their TLS options);
# fit what operators know (--reference, --reference-column, --feedback, --reference-fpr)
# and the model it refits from (--warm-start, --verify-key); federate also has fit's three
# differential-privacy options since the gateways noise their releases over Flower, and a
# gateway's own bound (--dp-max-epsilon); both take --[no-]suppression-rules (opt-in
# suppression rules from analyst feedback: two lines at 100 columns)
_MAX_LINES = {"fit": 128, "federate": 153}


def _help(capsys, monkeypatch, *argv, columns=100) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def _command_parser(name: str) -> argparse.ArgumentParser:
    return build_parser([name])._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("command", ["fit", "federate"])
def test_estimator_command_help_is_plain_short_and_complete(command, capsys, monkeypatch):
    text = _help(capsys, monkeypatch, command)
    for markup in _RST:
        assert markup not in text, markup
    assert len(text.splitlines()) < _MAX_LINES[command]
    assert max(len(line) for line in text.splitlines()) <= 100
    # every --method value is explained
    methods = _command_parser(command)._option_string_actions["--method"].choices
    for m in methods:
        assert re.search(rf"^  {re.escape(m)} +{re.escape(METHOD_HELP[m])}$", text, re.M), m
    # the groups of the estimator options
    for title in ("data:", "features", "federation rounds", "FedEP (fedep"):
        assert title in text, title


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_has_help(command):
    parsers = [_command_parser(command)]
    if command == "data":
        parsers = list(parsers[0]._subparsers._group_actions[0].choices.values())
    for p in parsers:
        for action in p._actions:
            if action.option_strings:
                assert action.help and action.help != argparse.SUPPRESS, action.option_strings
                for markup in _RST:
                    assert markup not in action.help, (action.option_strings, action.help)


def test_method_names_are_the_methods():
    assert set(METHOD_HELP) == set(METHODS)


def test_every_parameter_declares_a_plain_summary():
    """One summary per parameter, next to its constraint (``_parameter_summaries``),
    not the numpydoc entry's first sentence."""
    from fedep.detectors import DETECTORS
    from fedep.features import FeaturePipeline

    for cls in [*DETECTORS.values(), FeaturePipeline]:
        declared = set(cls._parameter_constraints) - {"callback"}
        assert declared <= set(cls._parameter_summaries), cls.__name__
    for spec in [*detector_param_table().values(), *pipeline_table().values()]:
        assert spec.help == plain_text(spec.help), spec.name
        assert len(spec.help) <= 72, spec.name


def test_plain_text_strips_rst():
    got = plain_text("see :func:`fedep.federation.rounds.converged` and ``S = 0`` or :class:`~a.B`")
    assert got == "see fedep.federation.rounds.converged and S = 0 or B"
    assert plain_text(":mod:`the rank <fedep.core.rank>`") == "the rank"


def test_reproduce_options_have_help(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "reproduce")
    assert re.search(r"--datasets NAME \.\.\. +the datasets", text)
    assert re.search(r"--seeds SEED \.\.\. +random seeds", text)


def test_top_level_help_lists_every_command(capsys, monkeypatch):
    text = _help(capsys, monkeypatch)
    for name in COMMANDS:
        assert re.search(rf"^    {name}\b", text, re.M), name


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], [], ["nonsense"]], ids=["version", "help", "none", "bad"]
)
def test_version_and_help_load_no_library(argv):
    """Answered before any command module (pandas, scikit-learn, numba) is imported."""
    code = (
        "import sys\n"
        "from fedep.cli import main\n"
        f"rc = main({argv!r})\n"
        "heavy = sorted(m for m in ('sklearn', 'pandas', 'numba', 'scipy', 'fedep.params')"
        " if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("HEAVY"))
    assert line.startswith("HEAVY []"), res.stdout + res.stderr
    rc = int(line.split()[-1])
    assert rc == (0 if argv and argv[0].startswith("--") else 2)
    if not argv or argv == ["nonsense"]:
        assert res.stderr.splitlines()[-1].startswith("fedep: error: ")


def test_python_m_fedep_version():
    res = subprocess.run(
        [sys.executable, "-m", "fedep", "--version"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and re.fullmatch(r"fedep \S+\n", res.stdout)
