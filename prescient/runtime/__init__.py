"""The processes that drive the engine: the tick (one pass, from cron or a test), the
long-running worker with its child processes, and the wake-up listener."""
