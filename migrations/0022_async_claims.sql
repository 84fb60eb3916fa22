-- Claims commit without waiting for the WAL flush (ARCHITECTURE.md "Decisions"): workdo.claim and
-- workdo.claim_queue gain `p_async`, with which a claim made in a statement of its own sets
-- `synchronous_commit = off` for its transaction. A new parameter is a new signature, so the old
-- ones go here; the engine files create the new ones (binaries that call them without it get
-- the default, a synchronous claim, as before).
drop function if exists workdo.claim(text, text, text, bigint, text, double precision);
drop function if exists workdo.claim_queue(text, text, bigint, text, double precision);
