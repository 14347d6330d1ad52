from prescient.engine.verbs import pause

from ._steer import SteerCommand


class Command(SteerCommand):
    help = (
        "Pause a workflow (its jobs stop being started; runs in flight go on) or one job. "
        "Undo with prescient_release. An unknown workflow is an error unless --create."
    )
    verb = pause
    can_create = True
    past = "Paused"
    unchanged = "was already paused"
    workflow_help = "Pause every job of this workflow, and new ones scheduled into it."
    job_help = "Pause one job, by id."
