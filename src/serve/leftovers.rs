//! What a bridge killed outright left behind: the runs it had in flight
//! (found by the journal or the shared queue at start, and ended
//! `interrupted` there) may still have processes running.

use super::Interrupted;

/// Kill what the runs a bridge had in flight when it died left running:
/// their process groups, and whatever carries their turn markers.
pub fn end_leftovers(interrupted: &[Interrupted]) {
    for run in interrupted {
        tracing::warn!(
            run_id = %run.run_id,
            "run was in flight when the bridge last stopped; marked failed ({})",
            crate::protocol::FailureCode::Interrupted
        );
        if let (Some(pgid), Some(workspace)) = (run.pgid, &run.workspace) {
            crate::harness::cage::kill_leftover_group(pgid, workspace);
        }
        if let Some(marker) = &run.marker {
            let killed = crate::harness::cage::kill_leftover_turn(marker);
            if killed > 0 {
                tracing::warn!(
                    run_id = %run.run_id,
                    killed,
                    "killed what the interrupted run's harness left running"
                );
            }
        }
    }
}
