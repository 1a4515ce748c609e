"""The order the suite runs in: the longest tests first.

With pytest-xdist each worker asks for the next test when it is free. Started first, the
long tests overlap each other and the many short ones fill the gaps; started last, one of
them would run alone while the other workers wait. Only the order changes, never what runs.

`LONGEST_S` holds the tests measured at 4 s or more (per call, every parametrisation of a
function summed, ``--durations`` of a 2-worker run on the 2-core development machine under
load, so read the figures as relative). A test missing from the table keeps its place in
collection order after the listed ones; a listed name that no longer exists is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

#: Seconds and ``module::function`` (no parameters), measured as the module docstring says.
_TABLE = """
110 test_acceptance.py::test_motes_without_faults_every_reading_durable_and_covered
 84 test_secagg_deployed.py::test_one_leaf_per_site_killed_mid_slot_as_deployed
 83 test_acceptance.py::test_motes_under_a_seeded_fault_schedule
 73 test_install_doc.py::test_install_md_runs_in_order_on_a_clean_sandbox
 69 test_simulation.py::test_ten_thousand_leaves_with_faults_and_stragglers_converge_under_the_message_budget
 58 test_faults.py::test_leaf_restarted_loses_at_most_the_checkpoint_cadence
 35 test_secagg_audit.py::test_audit_of_the_secagg_site_stays_below_its_epsilon
 31 test_clock_steps.py::test_replay_leaves_and_aggregators_through_a_wall_clock_step
 27 test_plausibility.py::test_no_honest_motes_leaf_is_quarantined_or_capped_over_a_full_replay
 26 test_faults.py::test_broker_frozen_20s_is_detected_within_two_keepalives_and_recovered
 25 test_secagg_leaf_restart.py::test_a_restarted_leaf_continues_its_ledger_and_the_site_counts_every_reading
 25 test_replay_trust.py::test_broker_killed_and_restarted_while_the_replay_awaits_confirmations_20_of_20
 22 test_plots.py::test_cli_run_with_plot_lists_the_files_in_its_json_summary
 18 test_secagg_agents.py::test_a_secagg_site_releases_slots_to_the_root_and_survives_a_leaf_stopped_mid_slot
 17 test_run_rejections.py::test_run_with_some_readings_rejected_exits_0_and_reports_them
 16 test_acceptance.py::test_second_dataset_digits_without_faults
 15 test_plots.py::test_motes_run_records_monotone_coverage_to_full_and_writes_the_pngs
 15 test_faults.py::test_straggler_10x_slower_does_not_hold_the_root_back
 14 test_faults.py::test_leaf_dead_for_good_keeps_its_contribution_and_is_marked_offline
 13 test_replay_trust.py::test_a_replay_the_leaves_reject_exits_1_with_a_one_line_summary_in_time
 12 test_enroll.py::test_retire_by_an_operator_who_may_not_write_the_topics_fails_in_one_line
 11 test_wheel.py::test_wheel_requires_exactly_what_an_agent_imports
 11 test_secagg_leaf_inflight.py::test_a_leaf_stopped_after_its_masked_input_is_released_once
 10 test_secagg_site_restart.py::test_a_restarted_site_agent_keeps_slot_0_in_the_roots_model
 10 test_leaf_sources.py::test_a_local_source_leaf_checkpoints_while_the_broker_is_unreachable
 10 test_fuzz_broker.py::test_10000_fuzzed_payloads_are_all_rejected_and_change_nothing
 10 test_cli_errors.py::test_watch_survives_another_client_logging_in_as_its_user
  9 test_fedpower_agents.py::test_sigstopped_leaf_rounds_keep_closing_and_it_rejoins
  9 test_faults.py::test_duplicated_and_shuffled_snapshots_give_the_identical_estimate
  9 test_faults.py::test_broker_sigkilled_mid_replay_and_restarted_loses_and_doubles_nothing
  9 test_faults.py::test_aggregator_sigkilled_and_restarted_rebuilds_within_2s
  9 test_benchmarks_smoke.py::test_update_reruns_one_benchmark_and_keeps_the_others_from_results_json
  9 test_benchmarks_smoke.py::test_the_suite_writes_a_report_with_every_section_and_plot
  8 test_cli.py::test_run_with_other_data_follows_its_number_of_features
  6 test_privacy_agents.py::test_run_the_shipped_private_topology_reports_its_guarantee
  6 test_fpca_memory.py::test_a_million_samples_leave_the_traced_memory_flat
  6 test_enroll.py::test_retire_disables_the_device_and_clears_its_status_but_keeps_its_snapshot
  6 test_enroll.py::test_enrolled_device_publishes_its_own_snapshot_but_not_under_site_b_or_as_a_sibling
  6 test_cli_errors.py::test_ctrl_c_ends_a_command_with_status_130_and_nothing_on_stderr
  6 test_cli_errors.py::test_an_agent_that_cannot_reach_its_broker_prints_at_most_a_line_per_attempt
  6 test_cli.py::test_run_motes_light_covers_every_leaf_within_five_percent_of_offline_svd
  5 test_membership_watch_broker.py::test_watch_and_the_dashboard_show_a_leaf_joining_and_being_forgotten
  5 test_fpca_streaming.py::test_oversampling_brings_motes_light_within_one_percent_of_the_offline_svd
  5 test_fpca_privacy.py::test_private_memory_stays_flat_and_within_d_b_plus_c_plus_r
  5 test_enroll.py::test_enrolled_device_reads_its_sensor_topic_and_the_model_but_not_another_leafs
  5 test_cli.py::test_two_deployments_acls_concatenated_share_one_broker
  5 test_cli.py::test_run_on_two_workers_reports_throughput_latency_resends_and_memory
  4 test_fleet_benchmark.py::test_agent_cost_reports_cpu_per_reading_and_memory_of_each_role
  4 test_fedpower_benchmark.py::test_the_section_lands_in_the_report_with_its_plot
  4 test_enroll.py::test_retire_forget_clears_the_snapshot_too_and_nothing_of_a_sibling
  4 test_deadlines.py::test_a_reason_that_keeps_firing_backs_off_to_a_few_lines_an_hour
"""  # noqa: E501

LONGEST_S: dict[str, float] = {
    name: float(seconds) for seconds, name in (row.split() for row in _TABLE.strip().splitlines())
}


def expected_seconds(item: pytest.Item) -> float:
    """The measured time of ``item``'s test function (0.0 when not in `LONGEST_S`)."""
    function = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return LONGEST_S.get(f"{item.path.name}::{function}", 0.0)


def longest_first(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the listed tests first, longest first; a stable sort, so parametrised
    cases and unlisted tests keep their collection order."""
    return sorted(items, key=lambda item: -expected_seconds(item))
