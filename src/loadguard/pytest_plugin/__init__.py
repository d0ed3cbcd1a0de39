"""The loadguard pytest plugin: every reference load audited, every comparison fingerprinted.

Options:
  --loadguard=off|warn|fail|repair   audit every ``PreTrainedModel.from_pretrained`` made during the session
                                     (any auto class, any helper): ``fail`` fails the test that loaded a broken
                                     model, naming the tensors; ``repair`` repairs and records (and fails the
                                     test when repair cannot make the model clean); ``warn`` warns.
  --loadguard-poison                 loads inside tests run under ``loadguard.poison()`` (the default for audited loads).
  --loadguard-no-poison              audited loads run as they are (not poisoned).
  --loadguard-forward                after the audit, run each audited model once (a forward pass, 8 greedy tokens on
                                     inputs built from its config): a crash fails the test, naming its line.
  --loadguard-record=PATH            write per-test outcomes and fingerprints as JSON (used by ``loadguard repeat``),
                                     one section per process that ran tests (``main``, or each pytest-xdist worker).
  --loadguard-workarounds-from=FILE  import a Python file that registers workarounds (repeatable).

Marker: ``@pytest.mark.loadguard(policy="repair", workarounds=["minicpmv-pos-cache"], strict_stale=True)``; its
``before_import`` workarounds (or ``"auto"``, the same as ``["auto"]``) wrap the whole of every load of the test as
transformers performs it: an auto class's ``from_pretrained`` / ``from_config`` (which import the remote code first),
a model class's ``from_pretrained``, ``AutoConfig`` / ``AutoTokenizer`` / ``AutoProcessor``, and
``get_class_from_dynamic_module``. ``[tool.loadguard] workarounds`` is the default of tests whose marker names none.
A test that fails the way a registered workaround fixes gets a note naming it and the marker that applies it, in every
mode (``off`` too, where nothing else is installed).
Fixtures: ``hf_runner`` (``with hf_runner(path, trust_remote_code=True) as r:``; policy, poison and
workarounds come from the options and marker), ``loadguard_report`` (the audits of the current test's loads).
The patch of ``from_pretrained`` lives for the session only and is undone at its end.

Under pytest-xdist every worker audits its own loads and hands its summary and record to the controller,
so the terminal summary and ``--loadguard-record`` cover every worker.
"""

from __future__ import annotations

import functools
import json

import pytest

from ._fixtures import hf_runner, loadguard_report  # noqa: F401  (fixtures the plugin provides)
from ._hook import install, note_on_failure
from ._state import POLICIES, Session, current_session, marker, on_event, sessions, uses_a_fixture
from ._summary import fingerprint, pytest_runtest_makereport, pytest_runtest_protocol, pytest_terminal_summary  # noqa: F401
from ._workers import pytest_sessionfinish, pytest_testnodedown  # noqa: F401


def pytest_addoption(parser):
    group = parser.getgroup("loadguard", "audit Hugging Face model loads (loadguard)")
    group.addoption(
        "--loadguard",
        choices=POLICIES,
        default=None,
        help="audit every from_pretrained: off, warn, fail or repair (default: [tool.loadguard] plugin, else off)",
    )
    group.addoption(
        "--loadguard-poison",
        action="store_true",
        default=None,
        dest="loadguard_poison",
        help="run model loads under loadguard.poison() (leftover memory becomes NaN); the default for every load the plugin "
        "audits, as loadguard audit's --poison; also when --loadguard is off ([tool.loadguard] poison)",
    )
    group.addoption(
        "--loadguard-no-poison",
        action="store_false",
        default=None,
        dest="loadguard_poison",
        help="audit loads as they are, without loadguard.poison() (leftover memory may pass for values: statuses may differ from the CLI's)",
    )
    group.addoption(
        "--loadguard-forward",
        action="store_true",
        default=False,
        help="after auditing a load, run the model: one forward pass and 8 greedy tokens on inputs built from its "
        "config; a crash fails the test (warns with --loadguard=warn), naming the model's line and the API it called",
    )
    group.addoption(
        "--loadguard-record", default=None, metavar="PATH", help="write per-test outcomes and fingerprints as JSON"
    )
    group.addoption(
        "--loadguard-workarounds-from",
        action="append",
        default=[],
        metavar="FILE",
        help="import a Python file that registers workarounds (repeatable)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "loadguard(policy=None, workarounds=(), strict_stale=False): per-test loadguard policy and workarounds",
    )
    policy, poison = config.getoption("--loadguard"), config.getoption("--loadguard-poison")
    # what the options do not say: the project's [tool.loadguard], found from the run's root
    from .._infra import settings
    from ..errors import LoadguardError

    try:
        project = settings.load(config.rootpath)
    except LoadguardError as error:
        raise pytest.UsageError(f"{error.message}\nHint: {error.hint}") from None
    poison = poison if poison is not None else project.get("poison")
    session = Session(
        policy=policy if policy is not None else project.get("plugin"),
        poison=None if poison is None else bool(poison),
        record_path=config.getoption("--loadguard-record"),
        forward=bool(config.getoption("--loadguard-forward")),
        workarounds=tuple(project.get("workarounds")),
    )
    files = config.getoption("--loadguard-workarounds-from") or []
    if files:
        from .. import workarounds as registry
        from ..errors import LoadguardError

        for file in files:
            try:
                registry.load_file(file)
            except LoadguardError as error:
                raise pytest.UsageError(f"loadguard: {error.message}. {error.hint}") from None
    sessions.append(session)
    from .._infra import observers

    session.undo.append(observers.listen(functools.partial(on_event, session)))
    if session.policy != "off" or session.poison:  # off touches nothing (a marker may still ask: see below)
        install(session)


def pytest_collection_modifyitems(session, config, items):
    """With ``--loadguard=off``, the hook goes in only for a run whose tests carry a ``loadguard`` marker or ask for a
    loadguard fixture."""
    own = current_session()
    if not own.installed and any(
        item.get_closest_marker("loadguard") is not None or uses_a_fixture(item) for item in items
    ):
        install(own)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """A ``loadguard`` marker that names an unknown workaround is the test's setup error, one line listing the known
    names; a setup (a fixture that loads) that fails the way a workaround fixes gets the note naming it."""
    workarounds = marker(item).get("workarounds")
    if workarounds:
        from .. import workarounds as registry
        from ..errors import LoadguardError

        wrong = None
        try:
            registry.resolve(workarounds)
        except LoadguardError as error:
            wrong = f"the loadguard marker of {item.nodeid}: {error.message}\nHint: {error.hint}"
        if wrong:  # failed outside the except block: one message, not a chained copy
            pytest.fail(wrong, pytrace=False)
    try:
        return (yield)
    except Exception as error:
        note_on_failure(error, item)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that fails the way a registered workaround fixes gets the note naming it, in every mode."""
    try:
        return (yield)
    except Exception as error:
        note_on_failure(error, item)
        raise


def pytest_unconfigure(config):
    if not sessions:
        return
    session = sessions.pop()
    while session.undo:
        session.undo.pop()()
    if session.record_path and not hasattr(config, "workerinput"):  # an xdist worker's record goes to the controller
        processes = dict(session.workers)
        if session.results or not processes:
            processes["main"] = session.results
        from .._infra import write_atomically

        write_atomically(
            session.record_path, json.dumps({"processes": processes}, indent=2)
        )  # two runs never mix their halves
