"""The contract at the bottom of dlscale: what the core and the plug-ins (the framework folders
included) agree on, importing nothing else of dlscale (checked by ``lint-imports``).

* :mod:`~dlscale.contract.registry` and :mod:`~dlscale.contract.plugins`: the registries and
  the one door plug-ins come in through (the ``dlscale.plugins`` entry-point group);
* :mod:`~dlscale.contract.options`: :class:`Option`, typed settings and their one parser;
* :mod:`~dlscale.contract.layout`: roles, processes and addresses of a run;
* the specs and registries of :mod:`~dlscale.contract.backends`,
  :mod:`~dlscale.contract.launchers`, :mod:`~dlscale.contract.models`,
  :mod:`~dlscale.contract.datasets` and :mod:`~dlscale.contract.frameworks`;
* :mod:`~dlscale.contract.engine`: the engine and synchronization-strategy protocols, one
  vocabulary for every framework; :mod:`~dlscale.contract.algorithms`: rules an algorithm
  follows alike in every engine (the asynchronous update);
* :mod:`~dlscale.contract.records` and :mod:`~dlscale.contract.events`: the typed event
  records a worker writes and the parent reads; :mod:`~dlscale.contract.comm_bytes`: how bytes
  on the wire are counted, the same for every engine;
* :mod:`~dlscale.contract.result`: a run's typed result, which the store writes and reads
  back and every reader takes its rows from, with the shapes of its stored values
  (:mod:`~dlscale.contract.shapes`) and its framework facts, read alike for every framework
  (:mod:`~dlscale.contract.facts`);
* :mod:`~dlscale.contract.files`: how every file of a result is written (atomically) and read;
* :mod:`~dlscale.contract.errors` and :mod:`~dlscale.contract.text`: the errors a user sees and
  how text from users is made safe to print.
"""
