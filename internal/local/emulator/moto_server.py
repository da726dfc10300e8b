"""moto_server with DynamoDB's isolation.

moto runs requests on threads, and its TransactWriteItems backs up whole
tables, applies the writes and, when a condition fails, puts the backups
back: a write made by another request in between is lost, and a reader can
see a half-applied transaction. DynamoDB itself isolates transactions from
every other read and write. This wrapper restores that by running the
DynamoDB backend's operations one at a time; everything else is moto as
shipped. Arguments are moto_server's (-H HOST -p PORT).
"""
import functools
import sys
import threading

from moto.dynamodb.models import DynamoDBBackend
from moto.server import main

_lock = threading.RLock()

OPERATIONS = [
    "put_item", "get_item", "update_item", "delete_item", "query", "scan",
    "batch_get_item", "batch_write_item", "transact_write_items",
    "transact_get_items", "execute_statement", "execute_transaction",
    "batch_execute_statement", "create_table", "delete_table", "update_table",
]


def _isolated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _lock:
            return fn(*args, **kwargs)
    return wrapper


for _name in OPERATIONS:
    setattr(DynamoDBBackend, _name, _isolated(getattr(DynamoDBBackend, _name)))

if __name__ == "__main__":
    main(sys.argv[1:])
