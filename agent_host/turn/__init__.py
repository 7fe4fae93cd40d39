"""One turn: the loop, the tool runner, steering and cancelling, compaction, continuation, built-in tools."""
