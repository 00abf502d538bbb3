"""agentgym.memory: durable memory and skill banks for agents; see the memory issue."""
