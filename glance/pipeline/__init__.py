"""The pipeline's shared parts: the typed config (:mod:`.config`), the stage
entry point (:mod:`.app`) and the output files (:mod:`.files`). The stages in
``stages/`` are thin programs over these and :mod:`glance.experiments`."""
