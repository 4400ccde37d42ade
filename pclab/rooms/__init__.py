"""A live room: the presenter's "predict, then reveal" with a whole room's predictions.

`store` keeps rooms, participants, predictions and reveals in SQLite (WAL, parameterised
queries); `tally` turns a room's predictions into what the presenter's view shows; `location`
picks the database file (PCL_ROOM_DB, else the lab's data folder). No Streamlit here: the
widgets are in pclab.ui.room_panel and pclab.ui.room_view.

    python -m pclab.rooms.location        # prints the database file the server would use
"""
