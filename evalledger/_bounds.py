"""The most a number the ledger holds may say, wherever it comes in (an agent's usage
line, a legacy run folder, an export, another ledger merged): past these it measured
nothing, and a few of them summed overflow a float (two durations of 1.7e308 are inf,
which a snapshot, JSON, holds only as null), so it is refused or not counted."""

# 2**53: past it a float (what JSON's numbers are to most readers, and what a cost is
# priced in) no longer counts tokens one by one.
MAX_TOKENS = 2**53
# 31 years.
MAX_SECONDS = 1e9
# A billion dollars: no budget, no call.
MAX_USD = 1e9
