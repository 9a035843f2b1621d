"""Why a user's input does not continue its streams: the continuation rules.

The names a rejected stream user is counted under (``tasks.continuation``),
with what each means, as the release report lists them beside the
validation rules.
"""

from __future__ import annotations

__all__ = ["CONTINUATION_RULES"]

#: why a user's input does not continue its streams: rule -> what it means (the
#: release report counts rejected users per rule, as it does for validation rules)
CONTINUATION_RULES = {
    "stream_changed_history": "repeats released steps with other values or other steps "
                              "present: a changed history cannot be released again",
    "stream_step_before_watermark": "has a step before the stream's watermark (the last "
                                    "released step) that was never released",
    "stream_gap_after_watermark": "continues after a gap: the steps right after the "
                                  "watermark are missing",
    "stream_other_epsilon": "asks another ε/w than the stream was released with",
    "stream_rerun_other_data": "reruns a release id on other data for this stream",
}
