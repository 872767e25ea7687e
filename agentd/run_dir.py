"""RUN_DIR: one directory per run in agentd's spool, the only thing agentd and a run's supervisor share
(two processes: a supervisor outlives an agentd restart). Every file in it, who writes it, who reads it:

- assignment.json: agentd, once, before the supervisor starts; read by the supervisor, and by agentd after
  a restart. The RunSpec as JSON (agentd/run/spec.py).
- supervisor.pid: whoever starts the supervisor (agentd, or the template's child); agentd reads it to tell
  whether the supervisor lives. "PID START_TIME".
- supervisor.log: the supervisor's stderr, for people.
- output.jsonl: the supervisor, appending whole records; agentd tails it (agentd/run/output.py).
- cancel: agentd (a cancel, a full spool); the supervisor looks for it every 100 ms. Empty.
- disk_full: agentd, before it stops a run for a full spool; read by agentd after a restart. Empty.
- inputs.jsonl, inputs.applied: agentd writes people's input, the supervisor how far it took it
  (agentd/run/session_input.py).
- outbox.jsonl (and its acknowledgements): agentd alone, what the control plane has not acknowledged
  (agentd/daemon/outbox.py).
- transcript.jsonl: a harness or runtime run's supervisor; a restarted supervisor resumes from it
  (agentd/drivers/harness/transcript.py).
- workspace.json: the supervisor, a Task's workspace (base, start, stack); for a restarted supervisor.
- incarnation: the supervisor, how often one started on this run; agentd resumes at most MAX_STARTS times.
- prepared: the supervisor, once the project's setup succeeded (its seconds); a restarted one skips setup.
"""

ASSIGNMENT = "assignment.json"
SUPERVISOR_PID = "supervisor.pid"
SUPERVISOR_LOG = "supervisor.log"
OUTPUT = "output.jsonl"
CANCEL = "cancel"
DISK_FULL = "disk_full"
INPUTS = "inputs.jsonl"
INPUTS_APPLIED = "inputs.applied"
OUTBOX = "outbox.jsonl"
TRANSCRIPT = "transcript.jsonl"
WORKSPACE = "workspace.json"
INCARNATION = "incarnation"
PREPARED = "prepared"
