"""The launchers: how N worker processes are started (local, torchrun, Slurm, mpirun,
horovodrun). Each has a pure ``plan()`` (commands and environments as data, shown by
--dry-run and unit-tested) and an impure ``run()`` that starts the plan and watches it; what a
launcher declares is :class:`dlscale.contract.launchers.LauncherSpec`, registered in
:mod:`dlscale.launchers.plugin`."""
