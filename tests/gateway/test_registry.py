"""Registry: pools by name and alias, snapshots, in-flight counts, status transitions."""

from __future__ import annotations

from gateway_fakes import settings_for

from gateway.backends.registry import Registry, Status


def registry() -> Registry:
    return Registry(settings_for({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}))


def test_pool_is_found_by_name_and_alias_only() -> None:
    reg = registry()
    assert reg.pool("m") is reg.pool("m-alias") is reg.pools[0]
    assert reg.pool("other") is None


def test_snapshot_reflects_status_and_inflight() -> None:
    reg = registry()
    reg.set_status("a", Status.READY)
    reg.acquire("a")
    a, b = reg.snapshots(reg.pools[0])
    assert (a.ready, a.inflight, a.starting) == (True, 1, False)
    assert (b.ready, b.starting) == (False, True)  # never probed: treated as starting
    reg.release("a")
    assert reg.snapshots(reg.pools[0])[0].inflight == 0


def test_set_status_reports_changes_and_remembers_ready() -> None:
    reg = registry()
    assert reg.set_status("a", Status.READY)
    assert not reg.set_status("a", Status.READY)
    reg.set_status("a", Status.DEAD)
    assert reg.backends["a"].ever_ready


def test_pool_is_ready_when_one_backend_is() -> None:
    reg = registry()
    assert not reg.pool_ready(reg.pools[0])
    reg.set_status("b", Status.READY)
    assert reg.pool_ready(reg.pools[0])


def test_max_context_is_the_largest_known() -> None:
    reg = registry()
    assert reg.max_context(reg.pools[0]) is None
    reg.backends["a"].discovered_context = 8192
    reg.backends["b"].discovered_context = 131072
    assert reg.max_context(reg.pools[0]) == 131072


def test_a_backend_down_after_serving_may_come_back_within_the_startup_grace() -> None:
    now = [0.0]
    reg = Registry(settings_for({"a": "http://127.0.0.1:1"}, probe={"startup_grace_s": 10.0}), lambda: now[0])
    reg.set_status("a", Status.READY)
    reg.note_down("a", "connection refused")
    assert reg.backends["a"].status is Status.DEAD and reg.may_come_back("a")
    assert reg.snapshots(reg.pools[0])[0].starting  # the router sees it as warming up again
    now[0] = 11.0
    assert not reg.may_come_back("a") and not reg.snapshots(reg.pools[0])[0].starting


def test_a_backend_dead_before_it_ever_served_is_not_waited_for() -> None:
    reg = registry()
    reg.set_status("a", Status.DEAD)
    assert not reg.may_come_back("a")


def test_a_request_answered_by_a_backend_called_dead_revives_it() -> None:
    reg = registry()
    reg.set_status("a", Status.READY)
    reg.set_status("a", Status.DEAD, "probe timed out")
    reg.note_success("a")
    assert reg.backends["a"].status is Status.READY and reg.served_within("a", 1.0)
