"""`edge-sdk fleet dashboard`: the fleet in a browser, from the operator's side.

One more MQTT client of the broker with the operator's identity (`FleetOperator`), plus the devices'
telemetry (`fleet/wire/telemetry.py`) and the rollouts' SQLite file. `live.py` keeps what the pages show
and a change sequence; `rollouts_view.py` reads the rollouts; `auth.py` is the login token, the session
cookie and CSRF; `actions.py` runs what the CLI runs (ping, start/stop, deploy, resume, rollback);
`app.py` is the Starlette application (pages, JSON, server-sent events); `server.py` wires it to uvicorn.
The pages (`static/`) are plain HTML and JavaScript with no build step, and render everything a device
reports as text.
"""
