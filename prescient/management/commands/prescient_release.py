from prescient.engine.verbs import release

from ._steer import SteerCommand


class Command(SteerCommand):
    help = (
        "Release a paused workflow or job: each paused job returns to its last state "
        "(scheduled, or running if its run is still in flight)."
    )
    verb = release
    past = "Released"
    unchanged = "was not paused"
    workflow_help = "Release this workflow and every paused job of it."
    job_help = "Release one job, by id."
