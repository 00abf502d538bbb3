"""Larkspur Mail: a webmail app for web agents (folders, labels, threads, compose/reply/forward, search, contacts, settings) and its task templates."""

from agentgym.envs.web.apps.mail.app import MailApp as App
from agentgym.envs.web.apps.mail.templates import tasks

__all__ = ["App", "tasks"]
