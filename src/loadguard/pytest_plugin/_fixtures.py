"""The fixtures: ``loadguard_report`` (the audits of the current test's loads) and ``hf_runner`` (the HfRunner class
with the session's policy and poison and the test's workarounds)."""

from __future__ import annotations

import pytest

from ._state import RUNNER_POLICY, TestRecord, current_session, marker, policy_for, workarounds_for


@pytest.fixture
def loadguard_report(request) -> list:
    """The audit reports of the models the current test loaded so far (a live list)."""
    return current_session().records.setdefault(request.node.nodeid, TestRecord()).reports


@pytest.fixture
def hf_runner(request):
    """The HfRunner class with this session's policy, poison and the test's workarounds applied."""
    from ..runner import HfRunner

    settings = marker(request.node)
    session = current_session()

    def make(model, *args, **kwargs):
        kwargs.setdefault("audit", RUNNER_POLICY[policy_for(request.node, session)])
        kwargs.setdefault(
            "poison", session.poisons(policy_for(request.node, session))
        )  # as loadguard audit: poisoned unless switched off
        kwargs.setdefault("workarounds", workarounds_for(request.node, session))  # "auto" stays one name
        kwargs.setdefault("strict_stale", bool(settings.get("strict_stale", False)))
        from ..errors import BrokenModelError, LoadguardError, hint_for

        try:
            return HfRunner(model, *args, **kwargs)
        except BrokenModelError as error:  # one clear failure, not a traceback into loadguard
            failure = f"loadguard: {error}"
            if kwargs["audit"] != "repair":  # under repair, repair already ran and could not make it clean
                failure += "\nIn this pytest run: --loadguard=repair repairs every audited load"
            from ._hook import reproducer_command

            command = reproducer_command(model, kwargs, kwargs["workarounds"], kwargs["poison"])
            failure += f"\nReproduce: {command}" if command else ""
        except LoadguardError as error:
            if not error.fixes:
                raise
            failure = f"loadguard: {error.message}\nHint: {hint_for(error, 'pytest')}"
        # failed outside the except block, so the report shows the message once, not as a chained exception
        pytest.fail(failure, pytrace=False)

    return make


__all__ = ["hf_runner", "loadguard_report"]
