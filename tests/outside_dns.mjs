// The DNS server of a test's (or a benchmark's) own "outside": sandboxd asks it for the
// names its egress policy allows (network.egress.resolvers), since no machine here
// reaches the internet. On 127.0.0.1, an ephemeral port (socket.address().port).
import dgram from 'node:dgram';

// A DNS server answering A queries for `names` (name -> IPv4), NXDOMAIN for the rest.
export function startDns(names) {
  const socket = dgram.createSocket('udp4');
  socket.on('message', (query, from) => {
    if (query.length < 12) return;
    let offset = 12;
    const labels = [];
    while (offset < query.length && query[offset] !== 0) {
      const length = query[offset];
      labels.push(query.subarray(offset + 1, offset + 1 + length).toString('latin1'));
      offset += 1 + length;
    }
    const questionEnd = offset + 5;  // the root label, QTYPE, QCLASS
    if (questionEnd > query.length) return;
    const type = query.readUInt16BE(offset + 1);
    const address = names[labels.join('.').toLowerCase()];
    const answer = address && type === 1;
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2);                          // the query's id
    header.writeUInt16BE(address ? 0x8180 : 0x8183, 2);   // a response; NXDOMAIN for unknown names
    header.writeUInt16BE(1, 4);                           // one question
    header.writeUInt16BE(answer ? 1 : 0, 6);
    const parts = [header, query.subarray(12, questionEnd)];
    if (answer) {
      const record = Buffer.alloc(16);
      record.writeUInt16BE(0xc00c, 0);  // the question's name
      record.writeUInt16BE(1, 2);       // A
      record.writeUInt16BE(1, 4);       // IN
      record.writeUInt32BE(5, 6);       // TTL
      record.writeUInt16BE(4, 10);
      address.split('.').forEach((octet, i) => record.writeUInt8(Number(octet), 12 + i));
      parts.push(record);
    }
    socket.send(Buffer.concat(parts), from.port, from.address);
  });
  return new Promise((resolve) => socket.bind(0, '127.0.0.1', () => resolve(socket)));
}

