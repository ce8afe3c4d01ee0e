from mmreason.cli import entry

entry()
