"""Run health: alarms read a run's step metrics as they are logged (``alarms``, ``monitor``), and
``mmreason report`` renders a run or eval directory as one self-contained HTML page (``report``)."""
