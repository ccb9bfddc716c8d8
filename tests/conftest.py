"""Shared test fixtures: the public data sets beside the repo, seeded randomness."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# The suite's longest tests (measured with ``--durations``; setup included), longest first. With
# ``pytest -n 2`` xdist hands tests out in collection order, so these start first and spread over
# both workers while the short ones fill the gaps, instead of a long one starting late and ending
# the run alone. Only the order changes; a name missing here is simply run in its usual place.
SLOW_FIRST = (
    "tests/spark_udf/test_cluster.py::test_backfill_and_stream_on_a_cluster_whose_workers_lack_the_engine",
    "tests/reliability/test_rule_time_unit.py::test_spark_reads_the_unit_as_the_embedded_engine",
    "tests/reliability/test_clock_guard.py::test_spark_refuses_the_future_bar_as_the_embedded_engine_does",
    "tests/reliability/test_kill_restart.py::test_sigkill_at_random_points_then_restart_gives_the_uninterrupted_output",
    "tests/cep/test_window_join.py::test_joined_analytics_with_compaction",
    "tests/cep/test_sharing.py::test_sharing_changes_nothing",
    "tests/cep/test_search_rules.py::test_rows_equal_running_every_query_on_every_document",
    "tests/cep/test_readme_tour.py::test_tour_command_runs_and_prints_what_the_readme_shows",
    "tests/cep/test_examples.py::test_every_rule_of_every_example_emits_on_its_bundled_data",
    "tests/cep/test_explain.py::test_explained_matches_are_the_engine_rows_of_the_key",
    "tests/cep/test_sharing.py::test_shared_conditions_over_real_bars_change_nothing",
    "tests/cep/test_sql2016.py::test_random_patterns_match_the_reference_whatever_the_batching",
    "tests/spark_udf/test_analytics_spark.py::test_weblogs_stream_restarted_from_its_checkpoint_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_search_spark.py::test_a_mixed_stream_reads_its_input_once_and_judges_late_documents_as_the_embedded_engine",
    "tests/cep/test_contiguity.py::test_gaps_skipped_reluctantly_are_skip_till_next_match",
    "tests/cep/test_percolator_data.py::test_headlines_sp500",
    "tests/spark_udf/test_timestamp_columns.py::test_spark_timestamp_columns_give_the_embedded_engines_event_times",
    "tests/spark_udf/test_streaming.py::test_stream_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_search_spark.py::test_a_running_stream_picks_up_a_changed_queries_file_between_micro_batches",
    "tests/spark_udf/test_tables_spark.py::test_joined_stream_restarted_from_its_checkpoint_gives_the_embedded_rows",
    "tests/spark_udf/test_cli.py::test_run_and_backfill_print_the_counts_and_agree",
    "tests/spark_udf/test_analytics_spark.py::test_stream_of_every_window_and_sketch_gives_the_embedded_engines_rows",
    "tests/reliability/test_kill_restart.py::test_sigterm_finishes_the_batch_checkpoints_and_exits_0",
    "tests/spark_udf/test_search_spark.py::test_a_rule_file_of_patterns_analytics_and_search_runs_in_one_call",
    "tests/cep/test_dictionary_fuzz.py::test_cep_run_rows_match_across_decoders_files_and_dictionary_resets",
    "tests/reliability/test_follow_output.py::test_standard_output_is_at_least_once_with_the_same_bytes",
    "tests/spark_udf/test_spark_state.py::test_spark_state_shows_the_embedded_engines_partial_matches_and_windows",
    "tests/cep/test_sql2016.py::test_long_keys_match_the_reference_whatever_the_batching",
    "tests/spark_udf/test_streams.py::test_a_stream_of_named_inputs_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_restart.py::test_changed_state_encoding_and_changed_rules_are_reported",
    "tests/spark_udf/test_streams.py::test_a_backfill_of_named_inputs_gives_the_rows_of_cep_run",
    "tests/spark_udf/test_restart.py::test_graceful_stop_then_restart_writes_each_row_once",
    "tests/spark_udf/test_analytics_spark.py::test_backfill_of_every_window_and_sketch_gives_the_embedded_engines_rows",
    "tests/spark_udf/test_search_spark.py::test_search_backfill_reports_late_and_bad_times_as_the_embedded_engine_does",
    "tests/spark_udf/test_search_spark.py::test_search_stream_gives_the_embedded_engines_rows",
    "tests/cep/test_explain_kinds.py::test_emitted_rows_are_the_engines",
    "tests/cep/test_nfa_reference.py::test_automaton_matches_reference",
    "tests/reliability/test_hostile_rules.py::test_no_module_evaluates_text",
    "tests/reliability/test_idle_progress.py::test_sigkill_after_an_idle_advance_then_restart_gives_the_same_bytes",
    "tests/spark_udf/test_backfill_groups.py::test_key_set_groups_give_cep_runs_rows",
    "tests/cep/test_views.py::test_view_with_a_hundred_rows_per_foreign_key",
    "tests/spark_udf/test_analytics_spark.py::test_weblogs_backfill_gives_typed_columns_and_the_embedded_engines_rows",
    "tests/spark_udf/test_views_spark.py::test_a_view_on_a_stream_restarted_from_its_checkpoint_gives_the_embedded_rows",
    "tests/cep/test_real_data.py::test_sp500_five_years_matches_reference",
    "tests/cep/test_percolator_properties.py::test_index_equals_every_query",
    "tests/spark_udf/test_hll_sketch_spark.py::test_stream_rows_are_the_embedded_engines",
    "tests/cep/test_navigation_batches.py::test_next_prev_measures_match_the_reference_whatever_the_batching",
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
