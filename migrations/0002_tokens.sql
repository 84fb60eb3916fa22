-- Why: the HTTP API needs access control. Bearer tokens are 256-bit random strings shown once;
-- only their SHA-256 is kept (a fast hash is enough for random secrets of that size), with a
-- role, an expiry and a revocation time.

create table workdo.tokens (
    id         bigint generated always as identity primary key,
    name       text        not null default '',
    role       text        not null check (role in ('admin', 'robot', 'viewer')),
    sha256     text        not null unique check (sha256 ~ '^[0-9a-f]{64}$'),
    created_at timestamptz not null default now(),
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
);
