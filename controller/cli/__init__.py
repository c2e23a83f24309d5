"""The `relaunch` command line: `main` parses the verb, each verb lives in `commands/`."""
