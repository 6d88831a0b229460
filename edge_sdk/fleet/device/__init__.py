"""The device's side of the fleet: the agent, its commands, deployments, health checks, artifact store and results forwarder."""
