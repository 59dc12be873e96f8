"""The versions of the folds' meaning and state (``Fold.VERSION``).

Bump one with any change to what its fold computes or to the layout of its
``state()``: snapshots made by the old code are then ignored, and runs replay in
full until a new snapshot is written. Kept in a module of their own so that reading
a snapshot (``runs``, ``show``) does not import the folds and the event models.
"""

SUMMARY_VERSION = 17
RESUME_VERSION = 2
