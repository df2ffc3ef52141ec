"""Every side effect of a run: model calls, tools, checkpoint writes.

Each module holds one class whose dependencies are injected by the worker;
its methods are the activities, registered under frozen names.
"""
