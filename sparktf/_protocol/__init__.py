"""The driver <-> task protocol (internal): the wire format (``wire``), the driver's server
(``server``), the task's client (``client``), heartbeats and per-epoch reports
(``heartbeats``) and the stall watchdog that reads them (``watchdog``). It imports
nothing else of sparktf's: the driver and the executor side both build on it."""
