//! The backend contract suite: one body per case, run unchanged against the memory gates and
//! the Redis gates (`memory::<case>` and `redis::<case>`). `cargo xtask contract` runs it and
//! prints the table of cases × backends.

mod breaker;
mod pacer;
mod quota;
mod support;

/// Declares each case once per backend.
macro_rules! on_every_backend {
    ($($module:ident :: $case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::support::run(crate::support::Kind::Memory, stringify!($case), |b| Box::pin(crate::$module::$case(b))).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::support::run(crate::support::Kind::Redis, stringify!($case), |b| Box::pin(crate::$module::$case(b))).await;
                }
            )*
        }
    };
}

on_every_backend!(
    breaker::contract_01_low_success_source_opens_at_min_calls,
    breaker::contract_02_rate_channel_never_opens_under_min_calls,
    breaker::contract_02b_the_window_is_two_buckets_that_rotate_on_write,
    breaker::contract_03_consecutive_threshold_is_raised_only_by_the_source_concurrency,
    breaker::contract_04_open_time_doubles_per_streak_is_capped_and_decays,
    breaker::contract_04b_decay_needs_a_real_success_after_twice_the_current_cooldown_eff,
    breaker::contract_04c_a_consecutive_open_keeps_the_streak_and_the_plain_cooldown,
    breaker::contract_05_result_invalid_and_request_rejected_never_enter_the_window,
    breaker::contract_06_a_burst_of_429_never_opens_a_burst_of_timeouts_opens_and_heals,
    breaker::contract_07_a_rate_channel_open_tops_failures_to_the_threshold,
    breaker::contract_08_every_retry_after_exit,
    breaker::contract_09_a_recovered_source_is_never_kept_out_by_the_memo,
    breaker::contract_10_a_warm_healthy_source_survives_a_short_run_a_dying_one_opens,
    breaker::contract_11_concurrent_try_enter_on_an_expired_open_gate_grants_one_probe,
    breaker::contract_11b_two_processes_see_one_gate,
    breaker::contract_12_stale_epoch_records_change_nothing,
    breaker::force_open_escalates_per_probe_and_leaves_an_open_gate_alone,
    breaker::half_open_needs_n_sequential_probe_successes,
    breaker::a_probe_ending_in_pushback_or_a_bad_payload_hands_the_lease_back,
    breaker::baseline_knobs_reproduce_the_old_breaker,
    breaker::slow_channel_opens_at_the_slow_rate_with_min_calls,
    breaker::slow_calls_rotate_with_the_window_and_count_nothing_without_the_channel,
    breaker::a_slow_probe_success_counts_as_a_probe_success,
    breaker::sla_adaptive_open_time_is_base_times_two_minus_the_success_rate_clamped,
    breaker::tenant_partitions_of_one_source_are_independent_gates,
    breaker::a_probe_close_starts_the_window_afresh,
    breaker::sla_adaptive_reads_the_window_as_of_now,
    quota::quota_concurrency_frees_on_release,
    quota::quota_leases_of_a_crashed_worker_expire,
    quota::quota_rpm_hints_when_the_oldest_start_leaves,
    quota::quota_tpm_charges_the_estimate_and_settle_corrects_it,
    quota::quota_refusal_names_the_first_limit_and_the_longest_wait,
    pacer::pacer_starts_at_eight_or_its_ceiling_and_grants_up_to_its_limit,
    pacer::pacer_cuts_once_per_round_trip_and_grows_back_by_one_over_the_limit,
    pacer::pacer_leases_of_a_crashed_worker_expire,
    pacer::pacer_two_processes_respect_one_limit,
);
