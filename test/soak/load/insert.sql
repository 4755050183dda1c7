\set c random(0, 99)
INSERT INTO items (c, v) VALUES (:c, soak_vector(:c));
