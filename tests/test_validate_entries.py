"""`validate: {all_policies: true}` adds every policy with params the real engine accepts."""

from __future__ import annotations

from experiments.validate.main import ValidateOptions, policy_entries
from policies.prefix_caching import check_prefix_caching_backend
from policies.registry import get_policy, make_config


class _Cfg:
    policies = ()


def test_all_policies_turn_prefix_caching_off_for_the_real_engine():
    entries = policy_entries(_Cfg(), ValidateOptions(all_policies=True))
    names = {e.name for e in entries}
    assert "vllm" in names
    for e in entries:
        config = make_config(get_policy(e.name), e.params, where=e.name)
        check_prefix_caching_backend(config, "real", e.name)  # raises if caching is on
