"""headwater: change data capture for MySQL and MariaDB, with a Spark pipeline."""

from headwater.errors import HeadwaterError
from headwater.position import (
    BinlogCoordinate,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    Position,
    parse_gtid_set,
)

__version__ = "0.1.0"

__all__ = [
    "BinlogCoordinate",
    "HeadwaterError",
    "MariadbGtid",
    "MariadbGtidPos",
    "MysqlGtid",
    "MysqlGtidSet",
    "Position",
    "__version__",
    "parse_gtid_set",
]
