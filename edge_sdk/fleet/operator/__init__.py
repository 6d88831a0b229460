"""The operator's side of the fleet: the client over one MQTT connection, staged rollouts, rollbacks and their store."""
