"""Shared test fixtures: the public data sets beside the repo, seeded randomness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

# Property tests draw the same examples on every run (each test's own settings still say how many):
# a CI run is then a fact about the code, not about the draw. Most tests said so one by one; the
# rest explored anew each run, and one found a test's own slip only in a CI run
# (tests/cep/test_presearcher_contract.py). HYPOTHESIS_PROFILE=explore draws afresh, to search.
settings.register_profile("seeded", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))

SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# The suite's longest tests (measured with ``--durations``; setup included), longest first. With
# ``pytest -n 2`` xdist hands tests out in collection order, so these start first and spread over
# both workers while the short ones fill the gaps, instead of a long one starting late and ending
# the run alone. Only the order changes; a name missing here is simply run in its usual place.
SLOW_FIRST = (
    "tests/spark_udf/test_cluster.py::test_backfill_and_stream_on_a_cluster_whose_workers_lack_the_engine",
    "tests/spark_udf/test_restart.py::test_killed_driver_then_restart_writes_each_row_once",
    "tests/spark_udf/test_session.py::test_a_command_run_without_activation_starts_its_own_python_for_the_workers",
    "tests/reliability/test_kill_restart.py::test_sigkill_at_random_points_then_restart_gives_the_uninterrupted_output",
    "tests/reliability/test_rule_time_unit.py::test_spark_reads_the_unit_as_the_embedded_engine",
    "tests/reliability/test_kill_restart.py::test_sigkill_with_a_table_fed_by_a_changelog_input",
    "tests/cep/test_window_join.py::test_joined_analytics_with_compaction",
    "tests/reliability/test_rule_time_unit.py::test_spark_timestamps_ignore_the_unit_and_one_query_needs_one_unit",
    "tests/reliability/test_follow_output.py::test_sigkill_while_following_a_live_writer_rewrites_the_same_bytes",
    "tests/cep/test_batch_dfa_group_fuzz.py::test_rules_sharing_history_match_each_rule_alone_and_the_automaton",
    "tests/spark_udf/test_backfill_groups.py::test_key_set_groups_give_cep_runs_rows",
    "tests/spark_udf/test_restart.py::test_changed_state_encoding_and_changed_rules_are_reported",
    "tests/cep/test_search_rules.py::test_rows_equal_running_every_query_on_every_document",
    "tests/cep/test_cli.py::test_bench_reports_search_and_analytics_figures",
    "tests/reliability/test_kill_restart.py::test_sigkill_with_a_view_of_two_tables",
    "tests/spark_udf/test_timestamp_columns.py::test_spark_timestamp_columns_give_the_embedded_engines_event_times",
    "tests/spark_udf/test_tables_spark.py::test_joined_stream_restarted_from_its_checkpoint_gives_the_embedded_rows",
    "tests/spark_udf/test_cli.py::test_run_and_backfill_print_the_counts_and_agree",
    "tests/cep/test_readme_tour.py::test_tour_command_runs_and_prints_what_the_readme_shows",
    "tests/cep/test_sharing.py::test_sharing_changes_nothing",
    "tests/cep/test_json_dictionary.py::test_blocks_sharing_dictionaries_decode_as_the_per_line_decoder",
    "tests/reliability/test_kill_restart.py::test_sigterm_finishes_the_batch_checkpoints_and_exits_0",
    "tests/cep/test_nfa_reference.py::test_automaton_matches_reference",
    "tests/spark_udf/test_analytics_spark.py::test_stream_of_every_window_and_sketch_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_restart.py::test_graceful_stop_then_restart_writes_each_row_once",
    "tests/cep/test_percolator_data.py::test_headlines_sp500",
    "tests/spark_udf/test_backfill_groups.py::test_rules_the_key_set_groups_cannot_run_take_the_general_path",
    "tests/cep/test_sharing.py::test_shared_conditions_over_real_bars_change_nothing",
    "tests/spark_udf/test_search_spark.py::test_a_rule_file_of_patterns_analytics_and_search_runs_in_one_call",
    "tests/cep/test_explain_kinds.py::test_emitted_rows_are_the_engines",
    "tests/cep/test_contiguity.py::test_gaps_skipped_reluctantly_are_skip_till_next_match",
    "tests/spark_udf/test_streams.py::test_a_backfill_of_named_inputs_gives_the_rows_of_cep_run",
    "tests/spark_udf/test_tables_spark.py::test_backfill_of_the_sector_rules_gives_the_embedded_rows",
    "tests/spark_udf/test_streaming.py::test_stream_gives_the_embedded_engines_rows",
    "tests/cep/test_sql2016.py::test_random_patterns_match_the_reference_whatever_the_batching",
    "tests/spark_udf/test_search_spark.py::test_a_mixed_stream_reads_its_input_once_and_judges_late_documents_as_the_embedded_engine",
    "tests/spark_udf/test_analytics_spark.py::test_weblogs_stream_restarted_from_its_checkpoint_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_search_spark.py::test_a_running_stream_picks_up_a_changed_queries_file_between_micro_batches",
    "tests/spark_udf/test_streaming.py::test_backfill_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_streams.py::test_a_stream_of_named_inputs_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_hll_sketch_spark.py::test_spark_estimates_our_sketch_as_approx_count_distinct",
    "tests/spark_udf/test_backfill_outputs.py::test_backfill_timeout_rows_equal_cep_runs_timeouts",
    "tests/spark_udf/test_analytics_spark.py::test_backfill_of_every_window_and_sketch_gives_the_embedded_engines_rows",
    "tests/reliability/test_clock_guard.py::test_spark_refuses_the_future_bar_as_the_embedded_engine_does",
    "tests/cep/test_views.py::test_view_with_a_hundred_rows_per_foreign_key",
    "tests/cep/test_dictionary_fuzz.py::test_cep_run_rows_match_across_decoders_files_and_dictionary_resets",
    "tests/spark_udf/test_hll_sketch_spark.py::test_stream_rows_are_the_embedded_engines",
    "tests/spark_udf/test_search_spark.py::test_search_stream_gives_the_embedded_engines_rows",
    "tests/cep/test_sql2016.py::test_long_keys_match_the_reference_whatever_the_batching",
    "tests/cep/test_absence.py::test_against_the_reference_whatever_the_batching",
    "tests/spark_udf/test_backfill_outputs.py::test_a_backfill_of_an_input_sorted_by_symbol_says_most_events_were_late",
    "tests/spark_udf/test_tables_spark.py::test_backfill_with_the_changelog_as_an_input_gives_the_engines_rows",
    "tests/spark_udf/test_hll_sketch_spark.py::test_backfill_rows_are_the_embedded_engines",
    "tests/cep/test_explain.py::test_explained_matches_are_the_engine_rows_of_the_key",
    "tests/cep/test_navigation_batches.py::test_next_prev_measures_match_the_reference_whatever_the_batching",
    "tests/spark_udf/test_views_spark.py::test_a_view_on_a_stream_restarted_from_its_checkpoint_gives_the_embedded_rows",
    "tests/reliability/test_rule_time_unit.py::test_the_full_nasa_day_in_seconds",
    "tests/spark_udf/test_backfill_outputs.py::test_the_stream_core_writes_the_embedded_timeouts",
    "tests/spark_udf/test_backfill_groups.py::test_the_group_stage_gets_one_partition_per_group_up_to_four_per_core",
    "tests/spark_udf/test_analytics_core.py::test_a_restart_from_the_saved_state_changes_nothing",
    "tests/reliability/test_follow_output.py::test_standard_output_is_at_least_once_with_the_same_bytes",
    "tests/reliability/test_idle_progress.py::test_sigkill_after_an_idle_advance_then_restart_gives_the_same_bytes",
    "tests/cep/test_explain_kinds.py::test_query_verdicts_are_the_percolators",
    "tests/reliability/test_hostile_rules.py::test_no_module_evaluates_text",
    "tests/spark_udf/test_spark_state.py::test_spark_state_shows_the_embedded_engines_partial_matches_and_windows",
    "tests/cep/test_sql2016.py::test_an_idle_session_ends_its_partition",
    "tests/spark_udf/test_layering.py::test_cep_cli_and_the_worker_core_load_no_pyspark",
    "tests/cep/test_examples.py::test_every_rule_of_every_example_emits_on_its_bundled_data",
    "tests/spark_udf/test_search_spark.py::test_search_backfill_reports_late_and_bad_times_as_the_embedded_engine_does",
    "tests/spark_udf/test_analytics_spark.py::test_weblogs_backfill_gives_typed_columns_and_the_embedded_engines_rows",
    "tests/cep/test_real_data.py::test_sp500_five_years_matches_reference",
    "tests/cep/test_percolator_properties.py::test_index_equals_every_query",
    "tests/reliability/test_follow_output.py::test_the_reader_of_standard_output_going_away_stops_without_a_checkpoint",
    "tests/reliability/test_durable.py::test_follow_picks_up_growing_and_new_files_exactly_once",
    "tests/reliability/test_cli_hardening.py::test_standard_input_as_csv_and_refused_with_state",
    "tests/spark_udf/test_analytics_core.py::test_stream_core_gives_the_embedded_engines_rows",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests named in :data:`SLOW_FIRST` to the front, longest first (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("[", 1)[0], len(rank)))


@pytest.fixture
def shared_data() -> Path:
    """Folder of the real public data sets; the test is skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (real data sets live beside the repo)")
    return SHARED_DATA
