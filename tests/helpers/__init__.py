"""Helpers the tests share (envs, policies, servers, scripted solutions): test modules import from here, never from each other."""
